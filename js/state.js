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
// Series are bounded like the kernel's timeline (core/timeline.py implements the same algorithm):
// past MAX_POINTS, the older half is thinned to the min and max of each group of four points, so a
// long run keeps its whole shape, spikes included, at a coarser grain and memory stays flat.

export const MAX_POINTS = 2000;

const isFiniteY = (y) => typeof y === "number" && Number.isFinite(y);

/**
 * Thin until at most `cap` points remain (pure). While over the cap: walk the older half (the first
 * floor(n/2) points) in consecutive groups of 4; from each full group keep the point with the
 * smallest y and the point with the largest y, in their original order, ignoring non-finite or
 * null y (the first of equal values wins); when argmin == argmax, or the group has fewer than 2
 * finite y, keep the group's first and last point. A trailing partial group (< 4 points) of the
 * older half is kept whole, and the newer half is kept as is. Stops early if a pass removes
 * nothing (a cap below 8 points).
 */
export function thin(xs, ys, cap = MAX_POINTS) {
  while (xs.length > cap) {
    const n = xs.length;
    const half = n >> 1;
    const keep = [];
    let i = 0;
    for (; i + 4 <= half; i += 4) {
      let lo = -1;
      let hi = -1;
      let finiteCount = 0;
      for (let j = i; j < i + 4; j++) {
        const y = ys[j];
        if (!isFiniteY(y)) continue;
        finiteCount += 1;
        if (lo < 0 || y < ys[lo]) lo = j;
        if (hi < 0 || y > ys[hi]) hi = j;
      }
      if (finiteCount < 2 || lo === hi) keep.push(i, i + 3);
      else keep.push(Math.min(lo, hi), Math.max(lo, hi));
    }
    for (; i < half; i++) keep.push(i);
    if (keep.length === half) break; // nothing to thin: the older half has no full group
    const nx = new Array(keep.length + n - half);
    const ny = new Array(nx.length);
    let k = 0;
    for (const j of keep) {
      nx[k] = xs[j];
      ny[k++] = ys[j];
    }
    for (let j = half; j < n; j++) {
      nx[k] = xs[j];
      ny[k++] = ys[j];
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
 * Over the thinned older half (each group's min and max only) the line differs from the kernel's at
 * the time; the recent half (full resolution, about a thousand points) matches it.
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
