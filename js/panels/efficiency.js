// Efficiency: MFU large under the convention picked in this view (a <select>; all conventions are
// computed, the others sit beside it), FLOPs per token with the executed (`counted`) figure beside
// it, never in its place, FLOPs spent against FLOPs required, achieved model TFLOP/s per GPU, and
// MFU over time: the engine's mfu/<convention> series, drawn as it is. Every FLOPs or MFU figure
// carries its convention's name (the named-convention invariant). No MFU without a peak: the reason is shown instead.
// A missing figure shows the core's reason (the snapshot's `reasons`), as `tm passport` does; a
// run on fake GPUs carries the demonstration banner (its OFU and peak are the fake GPUs').

import {
  byConv,
  CONVENTIONS,
  figure,
  flopsRequired,
  isObj,
  mfuChartWhy,
  mfuFigure,
  mfuOverTime,
  noteAbout,
  notMeasured,
  ofuFigure,
  reasonOf,
  runConvention,
  shownConvention,
  sortConventions,
  str,
} from "../derive.js";
import { el, setText } from "../dom.js";
import { isNum, percent, si } from "../format.js";
import { countedPerUnit, hfuFigure } from "../samples.js";
import { createChartSlot } from "./chartslot.js";
import { createFigure, showFigure } from "./figure.js";
import { createBanner, createPanel } from "./panel.js";

/** @typedef {import("../contract.js").Panel} Panel */
/** @typedef {import("../contract.js").Snapshot} Snapshot */
/** @typedef {import("../contract.js").Store} Store */
/** @typedef {import("../contract.js").View} View */

export { flopsRequired, noteAbout, sortConventions };
/** Kept for callers of the first version: the run's own convention. */
export const conventionOf = runConvention;

/**
 * @param {View} view
 * @returns {Panel}
 */
export function createEfficiency(view) {
  const panel = createPanel("efficiency", "efficiency");
  const banner = createBanner();

  // The convention switch: changes what is shown large everywhere in this view, nothing else.
  const select = el("select", { class: "tm-select", testid: "tm-convention", "aria-label": "FLOPs convention" });
  select.addEventListener("change", () => view.set("convention", select.value));
  const runConv = el("span", { class: "tm-control-note" });
  const controls = el(
    "div",
    { class: "tm-controls" },
    el("label", { class: "tm-control" }, document.createTextNode("convention "), select),
    runConv,
  );

  const mfu = createFigure("MFU", "tm-mfu", { wide: true, numTestid: "tm-mfu", tagTestid: "tm-mfu-convention" });
  const mfuOthers = el("div", { class: "tm-others", testid: "tm-mfu-others" });
  mfu.append(mfuOthers);
  const fpt = createFigure("FLOPs per token", "tm-flops-per-token", { wide: true });
  const fptOthers = el("div", { class: "tm-others", testid: "tm-flops-per-token-others" });
  const counted = el("div", { class: "tm-counted", testid: "tm-flops-counted" });
  const seqLine = el("div", { class: "tm-others", testid: "tm-flops-seq-len" });
  fpt.append(fptOthers);
  fpt.append(seqLine);
  fpt.append(counted);
  const spent = createFigure("FLOPs spent", "tm-flops-spent");
  const spentOthers = el("div", { class: "tm-others" });
  spent.append(spentOthers);
  const perGpu = createFigure("model FLOP/s per GPU", "tm-flops-per-gpu");
  // OFU is a counter (tensor-pipe activity): beside MFU, never in its place (the counters-beside invariant).
  const ofu = createFigure("OFU (counter: tensor-pipe activity)", "tm-ofu");
  // HFU [counted]: the counted step's executed FLOPs over the dense peak, beside MFU, never in its
  // place and never called MFU (js/samples.js); for a model no convention describes, the one
  const hfu = createFigure("HFU (executed FLOPs)", "tm-hfu", { numTestid: "tm-hfu", tagTestid: "tm-hfu-tag" });

  const slot = createChartSlot({ title: "", small: true, testid: "tm-mfu-chart" });
  const chartBox = el("div", { class: "tm-mfu-chart" }, slot.title, slot.el);

  panel.body.append(
    banner.el,
    controls,
    el("div", { class: "tm-eff-grid" }, mfu.el, fpt.el, spent.el, perGpu.el, ofu.el, hfu.el),
    chartBox,
  );

  let options = "";

  function fillSelect(snap, conv) {
    const names = sortConventions([
      ...new Set([...CONVENTIONS, ...(isObj(snap.flops_per_token) ? Object.keys(snap.flops_per_token) : [])]),
    ]);
    const key = names.join(",");
    if (key !== options) {
      options = key;
      select.replaceChildren(...names.map((n) => el("option", { value: n, text: n })));
    }
    if (select.value !== conv && names.includes(conv)) select.value = conv;
  }

  /**
   * MFU over time under `conv`: the engine's mfu/<conv> series as it is (a fraction, shown in %).
   * @param {Snapshot} snap
   * @param {Store} store
   * @param {string} conv
   * @param {boolean} redraw the timeline or the convention changed
   */
  function updateChart(snap, store, conv, redraw) {
    slot.setTitle(`MFU over time [${conv || "no convention"}]`);
    const why = mfuChartWhy(snap, conv);
    const series = why ? null : mfuOverTime(store.series, conv);
    const hasPoints = series !== null && series.ys.some((y) => y !== null);
    // no points yet: the core's reason for MFU when it has one (no timed step), else the plain
    // headline (the timeline has not come with the snapshot)
    const noPoints = reasonOf(snap, `mfu/${conv}`) || `MFU over time: ${notMeasured(snap)} (needs tokens/s at two or more steps)`;
    const reason = why || (hasPoints ? "" : noPoints);
    slot.say(reason);
    if (reason) {
      slot.clear();
      return;
    }
    const made = slot.ensure(conv, () => ({
      series: [{ label: `MFU [${conv}]`, color: 1, width: 1.75 }],
      // beside the figures (a wide page), about as tall as their three rows; 120 px at least
      height: (w) => Math.round(Math.min(240, Math.max(120, w * 0.45))),
      yRange: (_min, max) => [0, max > 0 ? max * 1.15 : 1],
      yLabel: "MFU (%)",
    }));
    if (made || redraw) slot.setData([series.xs, series.ys.map((y) => (y === null ? null : 100 * y))]);
  }

  return {
    el: panel.el,
    update({ snap, store, historyChanged, viewChanged }) {
      const conv = shownConvention(snap, view.convention);
      const rc = runConvention(snap);
      banner.update(snap);
      fillSelect(snap, conv);
      setText(runConv, rc && rc !== conv ? `the run reports in ${rc}` : "");
      const peak = isObj(snap.peak) ? snap.peak : null;

      // MFU, large, with its convention; the other conventions beside it.
      const m = mfuFigure(snap, conv);
      const avg = byConv(snap, "mfu_avg", conv);
      showFigure(mfu, m, percent, {
        tagText: conv,
        subText: [
          peak ? peakLine(peak, snap) : "",
          isNum(avg) ? `run average ${percent(avg)} [${conv}]` : "",
          peak ? countingText(snap) : "",
        ]
          .filter(Boolean)
          .join(" · "),
        title: peak ? peakTitle(peak) : null,
      });
      others(mfuOthers, peak && isObj(snap.mfu) ? snap.mfu : {}, conv, percent);
      panel.summarize(m.value !== null ? `MFU ${percent(m.value)} [${conv}]` : "");

      // FLOPs per token under the convention, the others beside, the executed count beside them.
      const table = isObj(snap.flops_per_token) ? snap.flops_per_token : {};
      const fptFig = figure(snap, "flops_per_token", conv);
      const f = fptFig.value;
      showFigure(fpt, fptFig, (v) => si(v, "FLOP/token"), { tagText: conv });
      others(fptOthers, table, conv, (v) => si(v, "FLOP"));
      setText(seqLine, f !== null ? seqLenText(snap) : "");
      setText(counted, countedText(snap));
      counted.classList.toggle("tm-unknown", countedPerUnit(snap) === null);

      // FLOPs spent against FLOPs required for the budget.
      const need = flopsRequired(snap, conv);
      const budgetWhy = isNum(snap.budget_tokens) || isNum(snap.budget_flops) ? "" : "no budget declared";
      showFigure(spent, figure(snap, "flops_spent", conv), (v) => si(v, "FLOP"), {
        tagText: conv,
        subText: need !== null ? `of ${si(need, "FLOP")} [${conv}] required for the budget` : budgetWhy,
      });
      others(spentOthers, isObj(snap.flops_spent) ? snap.flops_spent : {}, conv, (v) => si(v, "FLOP"));

      // Achieved model FLOP/s per GPU (the numerator of MFU, per device).
      const total = byConv(snap, "model_flops_per_s", conv);
      showFigure(perGpu, figure(snap, "model_flops_per_s_per_gpu", conv), (v) => si(v, "FLOP/s"), {
        tagText: conv,
        subText: peak && isNum(peak.flops) ? `per GPU, of a ${si(peak.flops, "FLOP/s", 4)} dense peak` : "per GPU",
        missingSub: total !== null ? `model FLOP/s of the whole run: ${si(total, "FLOP/s")} [${conv}]` : "",
      });

      const o = ofuFigure(snap);
      showFigure(ofu, o, percent, {
        subText: isNum(o.observed)
          ? `mean of the GPUs; observed ${si(o.observed, "FLOP/s")} per GPU (OFU × dense peak); a counter, beside MFU`
          : "a counter from NVML GPM, beside MFU, never in its place",
      });

      const h = hfuFigure(snap);
      showFigure(hfu, h, percent, { tagText: "counted", subText: h.sub });

      updateChart(snap, store, conv, historyChanged || viewChanged);
    },
    setTheme: slot.setTheme,
    destroy: slot.destroy,
  };
}

/** "of 989.5 TFLOP/s bf16 × 8 (datasheet)": what MFU divides by, and where that number came from
 * (a table row not yet re-read from its datasheet says so). */
function peakLine(peak, snap) {
  const m = isObj(snap.model) ? snap.model : {};
  const n = isNum(snap.gpus) ? snap.gpus : m.gpus;
  const gpus = isNum(n) && n > 1 ? ` × ${n}` : "";
  const dtype = str(peak.dtype) ? ` ${peak.dtype}` : "";
  const table = peak.verified === true ? " (datasheet)" : " (table, unverified)";
  const source = peak.source === "declared" ? " (declared)" : peak.source === "table" ? table : "";
  return `of ${si(peak.flops, "FLOP/s", 4)}${dtype}${gpus}${source}`;
}

/**
 * Which tokens MFU counts (docs/spec.md "Tokens and padding"): "tokens: non-pad"; "" unknown.
 * @param {Snapshot} snap
 */
export function countingText(snap) {
  const c = str(snap.tokens_counting);
  return c ? `tokens: ${c}` : "";
}

// how the counted step's attention was counted (flops_counted.attention); "sdpa" needs no word
const ATTENTION_TEXT = {
  matmul: "; attention counted as batched matmuls",
  "none counted": "; no attention op counted",
};

/** The executed-FLOPs line beside the conventions (docs/spec.md "Counted FLOPs"). */
/**
 * The sequence length the FLOPs per token are given at, when it is not simply the first
 * batch's: the run's token-weighted mean (snapshot `flops_per_token_seq_len`, `seq_len_mean`).
 * @param {Snapshot} snap
 */
export function seqLenText(snap) {
  const at = snap.flops_per_token_seq_len;
  const first = isObj(snap.model) ? snap.model.seq_len : null;
  if (!isNum(at) || !isNum(snap.seq_len_mean) || at === first) return "";
  const mean = Number.isInteger(at) ? String(at) : at.toFixed(1);
  return `at the run's mean sequence length, ${mean} tokens` + (isNum(first) ? ` (first batch ${first})` : "");
}

/** @param {Snapshot} snap */
export function countedText(snap) {
  const per = countedPerUnit(snap); // per token, else per sample (a model fed no token ids)
  if (per === null) return `[counted] executed FLOPs: ${reasonOf(snap, "flops_per_token_counted") || notMeasured(snap)}`;
  const c = isObj(snap.flops_counted) ? snap.flops_counted : {};
  const at = isNum(c.step) ? ` (step ${c.step})` : "";
  const attention = ATTENTION_TEXT[c.attention] || "";
  const missed = Array.isArray(c.not_counted) && c.not_counted.length ? `; not counted: ${c.not_counted.join(", ")}` : "";
  return `${si(per.value, per.unit)} [counted]: executed FLOPs of one real step${at}, recompute included${attention}${missed}`;
}

function peakTitle(peak) {
  return [str(peak.device), str(peak.citation)].filter(Boolean).join(" — ") || null;
}

/** The other conventions, small: "4.70 MFLOP [hf]". Rebuilt only when the text changes. */
const shown = new WeakMap();
export function others(container, table, conv, fmt) {
  const names = sortConventions(Object.keys(table)).filter((n) => n !== conv && isNum(table[n]));
  const text = names.map((n) => `${fmt(table[n])} [${n}]`);
  const key = text.join("\n");
  if (shown.get(container) === key) return;
  shown.set(container, key);
  container.replaceChildren(...text.map((t) => el("span", { class: "tm-other", text: t })));
}

