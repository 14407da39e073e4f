// The dashboard's store: the latest snapshot plus a bounded copy of every chart series.
//
// Wire contract (trainmeter/jupyter/widget.py):
//   history trait  {seq, series: {name: [[x...], [y...]]}}      a full copy; always replaces the store
//   "points" msg   {type: "points", seq, series: {name: [[x...], [y...]]}}
//                  points appended after the store's seq; applied only when msg.seq > store.seq
// A full history replaces the store whatever its seq: a widget's messages arrive in the order they
// were sent, so the latest history is the truth, and a producer that starts a new timeline (the
// kernel bridge does on a full resync) starts its seq again from zero. Only deltas are checked
// against seq, so one that a newer history already holds is not appended twice.
//   snapshot trait the latest figures (any key may be missing or null)
// Series are bounded like the kernel's timeline: past MAX_POINTS, every other point of the older half
// is dropped, so a long run keeps its whole shape at a coarser grain and memory stays flat.

export const MAX_POINTS = 2000;

/** Decimate until at most `cap` points remain: keep every other point of the older half. Pure. */
export function thin(xs, ys, cap = MAX_POINTS) {
  while (xs.length > cap && xs.length > 2) {
    const half = xs.length >> 1;
    const nx = [];
    const ny = [];
    for (let i = 0; i < half; i += 2) {
      nx.push(xs[i]);
      ny.push(ys[i]);
    }
    for (let i = half; i < xs.length; i++) {
      nx.push(xs[i]);
      ny.push(ys[i]);
    }
    xs = nx;
    ys = ny;
  }
  return [xs, ys];
}

const finite = (v) => (typeof v === "number" && Number.isFinite(v) ? v : null);

/**
 * Read one wire series `[[x...], [y...]]` into clean arrays: x finite and ascending, y a number or
 * null (a NaN loss is a gap, not a zero). Returns null for a malformed entry.
 */
export function readSeries(entry, after = -Infinity) {
  if (!Array.isArray(entry) || !Array.isArray(entry[0]) || !Array.isArray(entry[1])) return null;
  const [wx, wy] = entry;
  const xs = [];
  const ys = [];
  let last = after;
  for (let i = 0; i < wx.length; i++) {
    const x = finite(wx[i]);
    if (x === null || x <= last) continue; // out of order or repeated: the chart's x must ascend
    xs.push(x);
    ys.push(finite(wy[i]));
    last = x;
  }
  return { xs, ys };
}

let warnedMalformed = false;
function warnMalformed(name) {
  if (warnedMalformed) return;
  warnedMalformed = true;
  console.warn(`[trainmeter] ignoring a malformed series (${JSON.stringify(name)}); expected [[x...], [y...]]`);
}

/**
 * Create a store. Mutators return true when something changed and then notify subscribers once;
 * `rev.snapshot` and `rev.history` count changes so a view can skip work that is already drawn.
 */
export function createStore({ cap = MAX_POINTS } = {}) {
  const series = new Map(); // name -> {xs: number[], ys: (number|null)[]}
  const listeners = new Set();
  const store = {
    seq: -Infinity,
    snapshot: {},
    rev: { snapshot: 0, history: 0 },
    series,

    subscribe(fn) {
      listeners.add(fn);
      return () => listeners.delete(fn);
    },

    setSnapshot(snap) {
      if (!snap || typeof snap !== "object" || snap === store.snapshot) return false;
      store.snapshot = snap;
      store.rev.snapshot += 1;
      notify();
      return true;
    },

    /** Replace everything with a full history (see the contract above for why seq is not compared). */
    setHistory(history) {
      if (!history || typeof history !== "object" || !isSeq(history.seq)) return false;
      series.clear();
      for (const [name, entry] of Object.entries(history.series || {})) {
        const s = readSeries(entry);
        if (!s) {
          warnMalformed(name);
          continue;
        }
        [s.xs, s.ys] = thin(s.xs, s.ys, cap);
        series.set(name, s);
      }
      store.seq = history.seq;
      store.rev.history += 1;
      notify();
      return true;
    },

    /** Append a "points" delta; stale or repeated deltas (seq not above the store's) are ignored. */
    applyPoints(msg) {
      if (!msg || !isSeq(msg.seq) || msg.seq <= store.seq) return false;
      for (const [name, entry] of Object.entries(msg.series || {})) {
        const cur = series.get(name) || { xs: [], ys: [] };
        const add = readSeries(entry, cur.xs.length ? cur.xs[cur.xs.length - 1] : -Infinity);
        if (!add) {
          warnMalformed(name);
          continue;
        }
        for (let i = 0; i < add.xs.length; i++) {
          cur.xs.push(add.xs[i]);
          cur.ys.push(add.ys[i]);
        }
        if (cur.xs.length > cap) [cur.xs, cur.ys] = thin(cur.xs, cur.ys, cap);
        series.set(name, cur);
      }
      store.seq = msg.seq;
      store.rev.history += 1;
      notify();
      return true;
    },
  };

  function notify() {
    for (const fn of listeners) {
      try {
        fn(store);
      } catch (err) {
        console.error("[trainmeter] a store listener failed", err);
      }
    }
  }

  return store;
}

function isSeq(x) {
  return typeof x === "number" && Number.isFinite(x);
}

/**
 * Exponential moving average of a series, the same statistic as the kernel's `metrics.ema` (what the
 * snapshot's `ema` field holds), so the line ends where the reported EMA is: one update per point,
 * seeded with the first value, `beta * prev + (1 - beta) * y`, beta = 0.9 as `engine.EMA_BETA`.
 * A null y (a NaN loss on the wire) stays null and the next number re-seeds the average, as there.
 * Over the thinned older half the line is smoother than the kernel's was at the time; the recent half
 * (full resolution, about a thousand points) matches it.
 */
export function ema(ys, beta = 0.9) {
  const out = new Array(ys.length).fill(null);
  let prev = null;
  for (let i = 0; i < ys.length; i++) {
    const y = ys[i];
    prev = y === null ? null : prev === null ? y : beta * prev + (1 - beta) * y;
    out[i] = prev;
  }
  return out;
}

/**
 * Align several ascending series on one x axis (what uPlot draws): returns [xs, ys1, ys2, ...] with
 * null wherever a series has no point at that x.
 */
export function align(list) {
  const all = [];
  for (const s of list) for (const x of s.xs) all.push(x);
  all.sort((a, b) => a - b);
  const xs = [];
  for (const x of all) if (!xs.length || xs[xs.length - 1] !== x) xs.push(x);
  const out = [xs];
  for (const s of list) {
    const ys = new Array(xs.length).fill(null);
    let j = 0;
    for (let i = 0; i < s.xs.length; i++) {
      while (xs[j] < s.xs[i]) j++;
      ys[j] = s.ys[i];
    }
    out.push(ys);
  }
  return out;
}
