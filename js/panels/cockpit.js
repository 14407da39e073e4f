// Cockpit: the loss chart (x = step; training losses raw and EMA-smoothed, validation losses as
// points joined by a line, a log-scale switch) and the big figures: tokens against the budget with
// a progress bar, tokens/s, samples/s (any model: images, audio, tabular rows) with the samples
// per step, step time and ETA. A run fed no token ids shows its samples and samples/s first and
// says why it has no tokens (the engine's tokens_missing). Step, elapsed time and run state sit
// in the header right above it.

import { classifyLosses, figure, isObj, stateText, str, whyMissing } from "../derive.js";
import { el, setAttr, setText } from "../dom.js";
import { count, duration, isNum, NA, num, percent, si, tokens as tokenCount } from "../format.js";
import { noTokensWhy, perStepText, samplesRate } from "../samples.js";
import { align, ema } from "../state.js";
import { createChartSlot } from "./chartslot.js";
import { createFigure, showFigure } from "./figure.js";
import { createPanel } from "./panel.js";

/** @typedef {import("../contract.js").Panel} Panel */
/** @typedef {import("../contract.js").PanelContext} PanelContext */
/** @typedef {import("../contract.js").Snapshot} Snapshot */
/** @typedef {import("../contract.js").View} View */

const MAX_LOSS_LINES = 7; // one per theme colour
const ENDED = ["finished", "failed", "interrupted", "ended"];

/**
 * The lines of the loss chart from the store's series names, by the role the engine gave each
 * (`series`: snapshot.series; `sizes`: points held per name): the primary training loss raw
 * (faint) and smoothed, the other training losses raw, then the validation losses with points.
 */
export function lossLines(names, series, sizes = {}) {
  const { train, val } = classifyLosses(names, series, sizes);
  const lines = [];
  const [primary, ...otherTrain] = train;
  if (primary) {
    lines.push({ name: primary, label: primary, kind: "raw", val: false, color: 0, alpha: 0.45, width: 1 });
    lines.push({ name: primary, label: `${primary} (EMA)`, kind: "ema", val: false, color: 1, width: 2 });
  }
  for (const n of val) lines.push({ name: n, label: n, kind: "raw", val: true, width: 1.5, points: true });
  for (const n of otherTrain) lines.push({ name: n, label: n, kind: "raw", val: false, width: 1.25 });
  const kept = lines.slice(0, MAX_LOSS_LINES);
  kept.forEach((l, i) => {
    if (l.color === undefined) l.color = Math.min(i, 6);
  });
  return kept;
}

/**
 * Fraction of the token budget spent: the snapshot's `progress` (the engine gives it whenever
 * there is a token budget), else null.
 * @param {Snapshot} snap
 */
export function progressOf(snap) {
  return isNum(snap.progress) ? snap.progress : null;
}

/**
 * @param {View} view
 * @returns {Panel}
 */
export function createCockpit(view) {
  const panel = createPanel("cockpit", "cockpit");
  const loss = createLossCard(view);
  const figures = createFigures();
  panel.body.append(loss.el, figures.el);
  return {
    el: panel.el,
    update(ctx) {
      loss.update(ctx);
      figures.update(ctx.snap);
      const state = stateText(ctx.snap.run);
      panel.summarize(state ? `${state} · step ${isNum(ctx.snap.step) ? ctx.snap.step : NA}` : "");
    },
    setTheme: (t) => loss.setTheme(t),
    destroy: () => loss.destroy(),
  };
}

/** The loss chart with its legend; the chart is re-created only when its lines or scale change. */
function createLossCard(view) {
  const legend = el("div", { class: "tm-legend", testid: "tm-loss-legend" });
  // until the first frame, no words; then the core's reason while there is no loss to draw
  const slot = createChartSlot({ plotTestid: "tm-loss-chart" });
  const logBox = el("input", { type: "checkbox", testid: "tm-log-scale" });
  logBox.checked = view.logScale;
  logBox.addEventListener("change", () => view.set("logScale", logBox.checked));
  const card = el(
    "div",
    { class: "tm-card tm-chart-card" },
    el(
      "div",
      { class: "tm-card-head" },
      el("div", { class: "tm-card-title", text: "loss" }),
      el("label", { class: "tm-check" }, logBox, document.createTextNode(" log scale")),
    ),
    legend,
    slot.el,
  );

  let chartKey = "";
  let lines = [];
  let data = [[]];
  let logScale = false;

  function rebuild() {
    if (!lines.length) slot.clear();
    else {
      slot.ensure(chartKey, () => ({
        series: lines.map((l) => ({ label: l.label, color: l.color, width: l.width, alpha: l.alpha, points: l.points })),
        yLog: logScale,
        yLabel: "loss",
        onCursor: (idx) => drawLegend(idx),
      }));
    }
  }

  // Legend: series names via textContent; values at the pointer, else the latest known values.
  let legendItems = [];
  let legendStep = null;
  let latest = [];
  function buildLegend() {
    legend.replaceChildren();
    legendItems = lines.map((l) => {
      const val = el("span", { class: "tm-legend-value" });
      legend.append(
        el(
          "span",
          { class: `tm-legend-item tm-legend-${l.kind}${l.val ? " tm-legend-val" : ""}` },
          el("span", { class: `tm-swatch tm-swatch-${l.color}` }),
          el("span", { class: "tm-legend-name", text: l.label, title: l.label }),
          l.val ? el("span", { class: "tm-legend-kind", text: "val" }) : null,
          val,
        ),
      );
      return val;
    });
    legendStep = el("span", { class: "tm-legend-step" });
    legend.append(legendStep);
  }
  function drawLegend(idx) {
    const at = idx !== null && idx !== undefined && idx < data[0].length;
    // At the pointer, a series with no point at that step shows a dash (val_loss is sparse).
    legendItems.forEach((node, i) => {
      const v = at ? data[i + 1][idx] : latest[i];
      setText(node, at && (v === null || v === undefined) ? "–" : num(v));
    });
    if (legendStep) setText(legendStep, at ? `step ${data[0][idx]}` : "");
  }

  /** @param {PanelContext} ctx */
  function update({ snap, store, historyChanged }) {
    // a series the engine marks superseded (backward_loss once a tracker reports the loss) is not drawn
    const series = isObj(snap.series) ? snap.series : {};
    const names = [...store.series.keys()].filter((n) => !(isObj(series[n]) && series[n].superseded));
    const sizes = Object.fromEntries(names.map((n) => [n, store.series.get(n).xs.length]));
    const next = lossLines(names, series, sizes);
    const key = JSON.stringify(next) + (view.logScale ? "|log" : "");
    if (logBox.checked !== view.logScale) logBox.checked = view.logScale;
    if (key !== chartKey) {
      chartKey = key;
      lines = next;
      logScale = view.logScale;
      rebuild();
      buildLegend();
      historyChanged = true;
    }
    slot.say(lines.some((l) => (store.series.get(l.name)?.xs.length ?? 0) > 0) ? "" : whyMissing(snap, "loss"));
    if (historyChanged && slot.drawn()) {
      const cols = lines.map((l) => {
        const s = store.series.get(l.name);
        if (l.kind === "raw") return s;
        const given = store.series.get(`${l.name}_ema`);
        return given || { xs: s.xs, ys: ema(s.ys) };
      });
      data = align(cols);
      // A log axis cannot show zero or a negative loss: those points become gaps, not zeros.
      slot.setData(logScale ? data.map((col, i) => (i === 0 ? col : col.map((y) => (y > 0 ? y : null)))) : data);
    }
    // Latest values: the snapshot's own figures where it has them (its EMA is the official one).
    const reported = isObj(snap.series) ? snap.series : {};
    latest = lines.map((l, i) => {
      const r = isObj(reported[l.name]) ? reported[l.name] : {};
      const own = l.kind === "ema" ? r.ema : r.value;
      return isNum(own) ? own : lastValue(data[i + 1]);
    });
    drawLegend(null);
  }

  return { el: card, update, setTheme: slot.setTheme, destroy: slot.destroy };
}

/** Tokens (against the budget), tokens/s, samples/s, step time, ETA; for a run fed no token ids,
 * samples and samples/s first, then step time and ETA, then tokens with the engine's reason. A
 * missing figure shows the core's reason (the snapshot's `reasons`), as every surface does. */
function createFigures() {
  const tokens = createFigure("tokens", "tm-tokens");
  const fill = el("div", { class: "tm-bar-fill" });
  const bar = el(
    "div",
    { class: "tm-bar", role: "progressbar", "aria-valuemin": "0", "aria-valuemax": "100", testid: "tm-progress" },
    fill,
  );
  tokens.append(bar);
  const rate = createFigure("tokens/s", "tm-tokens-per-s");
  const samples = createFigure("samples", "tm-samples");
  const sampleRate = createFigure("samples/s", "tm-samples-per-s");
  const stepTime = createFigure("step time", "tm-step-time");
  const eta = createFigure("ETA", "tm-eta");
  const box = el("div", { class: "tm-figures" });
  let order = "";

  /** @param {Snapshot} snap */
  function update(snap) {
    // a run fed no token ids: samples first, tokens last with the engine's reason
    const noTokens = noTokensWhy(snap);
    const key = noTokens ? "samples" : "tokens";
    if (key !== order) {
      order = key;
      const figs = noTokens ? [samples, sampleRate, stepTime, eta, tokens] : [tokens, rate, sampleRate, stepTime, eta];
      box.replaceChildren(...figs.map((f) => f.el));
    }
    const r = samplesRate(snap, !noTokens);
    showFigure(sampleRate, r, String, { unitText: r.unit, subText: r.sub });
    if (noTokens) {
      showFigure(samples, figure(snap, "samples"), count, { subText: perStepText(snap) });
      tokens.missing("n/a", noTokens);
      bar.hidden = true;
    } else updateTokens(snap);
    showFigure(stepTime, figure(snap, "step_time_s"), duration, { subText: "mean of the last 20 steps" });
    updateEta(snap);
  }

  /** @param {Snapshot} snap */
  function updateTokens(snap) {
    const p = progressOf(snap);
    const budget = isNum(snap.budget_tokens) && snap.budget_tokens > 0 ? snap.budget_tokens : null;
    const budgetText = budget ? `of ${tokenCount(budget, 3)} · ${percent(p)}` : "no budget declared";
    showFigure(tokens, figure(snap, "tokens"), tokenCount, { subText: budgetText, missingSub: budgetText });
    bar.hidden = budget === null || !isNum(p);
    if (!bar.hidden) {
      const pct = Math.min(100, Math.max(0, p * 100));
      fill.style.width = `${pct}%`;
      setAttr(bar, "aria-valuenow", pct.toFixed(1));
    }

    showFigure(rate, figure(snap, "tokens_per_s"), (v) => si(v, "", 3), {
      unitText: "tokens/s",
      subText: isNum(snap.tokens_per_s_avg) ? `avg ${si(snap.tokens_per_s_avg, "", 3)} tokens/s` : "",
    });
  }

  /** @param {Snapshot} snap */
  function updateEta(snap) {
    const budget = isNum(snap.budget_tokens) && snap.budget_tokens > 0 ? snap.budget_tokens : null;
    const state = isObj(snap.run) ? str(snap.run.state) : "";
    // "done" only when the budget was reached; else the core's reason (a run that stopped short
    // says how far it got: "no ETA: the run has finished, at 42.0% of its budget")
    if (ENDED.includes(state) && budget && isNum(snap.progress) && snap.progress >= 1) eta.set("done", { subText: `run ${state}` });
    else showFigure(eta, figure(snap, "eta_s"), duration, { subText: "to the budget at the current rate" });
  }

  return { el: box, update };
}

function lastValue(ys) {
  if (!ys) return null;
  for (let i = ys.length - 1; i >= 0; i--) if (ys[i] !== null && ys[i] !== undefined) return ys[i];
  return null;
}
