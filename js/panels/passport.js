// Run passport: the model-card summary of the run so far (model, tokens, steps, FLOPs spent under
// the convention shown in this view with the others beside, GPU-hours, energy, hardware, dtype,
// MFU with its convention, throughput, where the time goes, start and elapsed time, trainmeter
// version), then every series the training code reported with its last value. A missing figure
// shows the core's reason, in the words of `tm passport`; a demonstration run on fake GPUs carries
// its banner. Names and values from training code go in through textContent only.

import {
  costOverlay,
  dtypeText,
  figure,
  hardwareText,
  isObj,
  paramCounts,
  rankRows,
  shownConvention,
  sortConventions,
  str,
  tagged,
  whyMissing,
} from "../derive.js";
import { el, setText } from "../dom.js";
import { amount, count, dateTime, dollars, duration, isNum, kwh, NA, num, percent, si, tokens as tokenCount } from "../format.js";
import { hfuFact, noTokensFact, samplesFact, throughputFact } from "../samples.js";
import { createBanner, createFacts, createPanel } from "./panel.js";
import { splitShares } from "./time.js";

/** @typedef {import("../contract.js").Panel} Panel */
/** @typedef {import("../contract.js").Snapshot} Snapshot */
/** @typedef {import("../contract.js").View} View */

const MAX_ROWS = 500;

/**
 * One fact of the passport: its text, small text after it, and whether it is a missing figure
 * (shown muted).
 * @typedef {{text: string, sub?: string, muted?: boolean, show?: boolean}} Fact
 */

/**
 * A missing figure, as the core said it: the whole reason, muted ("not measured: ...").
 * @param {string} why
 * @returns {Fact}
 */
const unknownFact = (why) => ({ text: why, muted: true });

/**
 * A figure of every convention, the shown one first: "4.58 GFLOP [hf]" when known, the core's
 * reason tagged with its convention when not ("n/a [titan] (titan needs ...)", as `tm passport`
 * writes it), then the others known beside it.
 * @param {Snapshot} snap
 * @param {string} key "flops_spent", "mfu_avg", ...
 * @param {string} conv
 * @param {(v: number) => string} fmt
 * @returns {Fact}
 */
function byConvFact(snap, key, conv, fmt) {
  const table = isObj(snap[key]) ? snap[key] : {};
  const others = sortConventions(Object.keys(table))
    .filter((c) => c !== conv && isNum(table[c]))
    .map((c) => `${fmt(table[c])} [${c}]`);
  const f = figure(snap, key, conv);
  const sub = others.length ? `· ${others.join(" · ")}` : "";
  if (f.value !== null) return { text: `${fmt(f.value)} [${conv}]`, sub };
  return { text: tagged(f.why, conv), sub, muted: true };
}

/**
 * The passport's facts from a snapshot, as the panel shows them (and js/tests/surfaces.test.js
 * reads them beside `tm passport`'s): each a {text, sub, muted}. Figures the snapshot lacks show
 * the core's reason; nothing is worked out here but units and the dollars at a typed price.
 * @param {Snapshot} snap
 * @param {{convention?: string, price?: number | null}} view
 * @param {string} [bundleVersion]
 * @returns {Record<string, Fact>}
 */
export function passportFacts(snap, view, bundleVersion = "") {
  const conv = shownConvention(snap, view.convention);
  const m = isObj(snap.model) ? snap.model : null;
  /** @type {Record<string, Fact>} */
  const out = {};

  const { all, withoutEmbeddings } = paramCounts(snap);
  if (m) {
    const parts = [str(m.name)];
    if (all !== null) parts.push(`${si(all)} parameters${withoutEmbeddings !== null ? ` (${si(withoutEmbeddings)} without embeddings)` : ""}`);
    if (isNum(m.layers) && isNum(m.width)) parts.push(`${m.layers} layers × ${m.width}`);
    if (isNum(m.vocab)) parts.push(`vocab ${count(m.vocab)}`);
    const ctx = isNum(m.context) ? m.context : m.seq_len;
    if (isNum(ctx)) parts.push(`context ${count(ctx)}`);
    out.model = { text: parts.filter(Boolean).join(" · ") || NA };
  } else out.model = unknownFact(whyMissing(snap, "model"));

  out.tokens = noTokensFact(snap) || { text: tokenCount(snap.tokens), muted: !isNum(snap.tokens) };
  out.samples = samplesFact(snap);
  out.steps = { text: count(snap.step), muted: !isNum(snap.step) };
  out.flops = byConvFact(snap, "flops_spent", conv, (v) => si(v, "FLOP"));

  const hours = figure(snap, "gpu_hours");
  out.gpuHours = hours.value !== null ? { text: `${amount(hours.value)} GPU-h` } : unknownFact(hours.why);

  const cost = costOverlay(view.price, snap);
  out.energy = cost.kwh.value !== null ? { text: kwh(snap.energy_j), sub: "(NVML energy counter)" } : unknownFact(cost.kwh.why);

  const hw = hardwareText(snap);
  out.device = hw ? { text: hw } : unknownFact(whyMissing(snap, "device"));
  const dtype = dtypeText(snap);
  out.dtype = dtype ? { text: dtype } : unknownFact(whyMissing(snap, "dtype"));

  const mfu = byConvFact(snap, "mfu_avg", conv, percent); // run averages, as tm passport says
  out.mfu = mfu.muted ? mfu : { ...mfu, sub: `${mfu.sub ? `${mfu.sub} · ` : "· "}run averages` };

  const rate = figure(snap, "tokens_per_s_avg");
  out.rate = rate.value !== null
    ? { text: `${si(rate.value, "", 3)} tokens/s`, sub: "(mean over the timed steps, not tokens over elapsed time)" }
    : unknownFact(rate.why);
  out.rate = throughputFact(snap, out.rate); // samples/s beside, or alone without tokens
  out.hfu = hfuFact(snap);

  const shares = splitShares(snap);
  out.time = shares.length ? { text: shares.join(" · "), sub: "of the run's time (rank 0)" } : unknownFact(whyMissing(snap, "time_split"));

  const rows = rankRows(snap);
  out.ranks = rows.length >= 2 ? { text: `${count(rows.length)} ranks`, sub: stragglerText(rows, snap.stragglers) } : { text: "", show: false };

  const run = isObj(snap.run) ? snap.run : {};
  out.started = { text: isNum(run.started) ? dateTime(run.started) : NA, sub: isNum(snap.elapsed_s) ? `· ${duration(snap.elapsed_s)} elapsed` : "", muted: !isNum(run.started) };
  out.version = str(run.version)
    ? { text: run.version }
    : { text: "not in the snapshot", sub: bundleVersion ? `(dashboard ${bundleVersion})` : "", muted: true };

  out.cost = cost.spent.value !== null
    ? { text: dollars(cost.spent.value), sub: `at ${dollars(view.price)} per GPU-hour (this view only)` }
    : { text: cost.spent.why, muted: true };
  return out;
}

/**
 * @param {View} view
 * @param {{bundleVersion?: string}} [options]
 * @returns {Panel}
 */
export function createPassport(view, { bundleVersion = "" } = {}) {
  const panel = createPanel("passport", "run passport");
  const banner = createBanner();
  const factList = createFacts([
    ["model", "model"],
    ["tokens", "tokens"],
    ["samples", "samples", "tm-passport-samples"],
    ["steps", "steps"],
    ["flops", "FLOPs spent", "tm-passport-flops"],
    ["gpuHours", "GPU-hours"],
    ["energy", "energy", "tm-kwh"],
    ["device", "hardware", "tm-passport-hardware"],
    ["dtype", "dtype"],
    ["mfu", "MFU", "tm-passport-mfu"],
    ["hfu", "HFU", "tm-passport-hfu"],
    ["rate", "throughput"],
    ["time", "where the time goes", "tm-passport-time"],
    ["ranks", "ranks", "tm-passport-ranks"],
    ["started", "started"],
    ["version", "trainmeter"],
    ["cost", "cost"],
  ]);
  const facts = factList.row;
  const table = createSeriesTable();
  panel.body.append(
    banner.el,
    factList.el,
    el("div", { class: "tm-label", text: "reported series" }),
    table.el,
  );

  return {
    el: panel.el,
    update({ snap }) {
      banner.update(snap);
      const shown = passportFacts(snap, view, bundleVersion);
      for (const [key, f] of Object.entries(shown)) {
        const row = facts[key];
        if (!row) continue;
        row.show(f.show !== false);
        row.set(f.text, { subText: f.sub || "", muted: Boolean(f.muted) });
      }
      table.update(snap.series, whyMissing(snap, "series"));
      panel.summarize(isNum(snap.tokens) ? `${tokenCount(snap.tokens)} tokens` : "");
    },
  };
}

/** "· straggler: rank 2, the job waits 31.3 ms per step on it (35.3%)", "· no straggler", or "". */
function stragglerText(rows, stragglers) {
  if (!Array.isArray(stragglers)) return "";
  const flagged = rows.filter((r) => r.straggler);
  if (!flagged.length) return "· no straggler";
  const one = (r) =>
    `rank ${r.rank}` + (r.jobWait === null ? "" : `, the job waits ${duration(r.jobWait)} per step on it${r.jobWaitShare === null ? "" : ` (${percent(r.jobWaitShare)})`}`);
  return `· straggler${flagged.length > 1 ? "s" : ""}: ${flagged.map(one).join("; ")}`;
}

/** Every series in snapshot.series with its last value, step and EMA; rows rebuilt only when the names change. */
function createSeriesTable() {
  const tbody = el("tbody");
  const more = el("div", { class: "tm-caption" });
  const empty = el("div", { class: "tm-caption" }); // the core's reason while there is none
  const table = el(
    "table",
    { class: "tm-table tm-series-table" },
    el("thead", {}, el("tr", {}, ...["series", "last", "step", "EMA"].map((h) => el("th", { text: h })))),
    tbody,
  );
  const root = el("div", { class: "tm-table-scroll", testid: "tm-series-table" }, table, empty, more);
  let key = "";
  let cells = [];
  let names = [];
  return {
    el: root,
    /**
     * @param {any} series the snapshot's
     * @param {string} none why there is none, the core's reason
     */
    update(series, none) {
      const all = isObj(series) ? Object.keys(series).sort() : [];
      names = all.slice(0, MAX_ROWS);
      const k = names.join("\n");
      if (k !== key) {
        key = k;
        cells = names.map((n) => [el("td", { class: "tm-series-name", text: n, title: n }), el("td"), el("td"), el("td")]);
        tbody.replaceChildren(...cells.map((c) => el("tr", {}, ...c)));
      }
      names.forEach((n, i) => {
        const s = isObj(series[n]) ? series[n] : {};
        setText(cells[i][1], num(s.value, 4));
        setText(cells[i][2], count(s.step));
        setText(cells[i][3], isNum(s.ema) ? num(s.ema, 4) : "");
      });
      table.hidden = names.length === 0;
      empty.hidden = names.length > 0;
      setText(empty, names.length ? "" : none);
      setText(more, all.length > names.length ? `${all.length - names.length} more series not listed` : "");
    },
  };
}
