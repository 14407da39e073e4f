// Cockpit: the loss chart (x = step; every loss series raw, plus an EMA of the training loss) and the
// big figures: tokens (against the budget when there is one), tokens/s, step time and ETA.

import { createChart } from "../charts.js";
import { el, setAttr, setText } from "../dom.js";
import { duration, isNum, NA, num, percent, si, tokens as tokenCount } from "../format.js";
import { align, ema } from "../state.js";
import { createFigure } from "./figure.js";
import { isObj, str } from "./header.js";

const MAX_LOSS_SERIES = 6;
const ENDED = ["finished", "failed", "interrupted"];

/** The loss series to draw, training loss first: [{name, train}] from the store's series names. */
export function lossSeries(names) {
  const losses = names.filter((n) => /loss/i.test(n) && !/_ema$/.test(n));
  const train =
    losses.find((n) => n === "train_loss") ||
    losses.find((n) => /train/i.test(n)) ||
    losses.find((n) => n === "loss") ||
    null;
  const rest = losses.filter((n) => n !== train).sort((a, b) => rank(a) - rank(b) || (a < b ? -1 : 1));
  return { train, others: rest.slice(0, MAX_LOSS_SERIES - 1) };
}
const rank = (n) => (n === "val_loss" ? 0 : /val|eval|valid/i.test(n) ? 1 : 2);

/** Fraction of the token budget spent: the snapshot's own figure, else tokens / budget. */
export function progressOf(snap) {
  if (isNum(snap.progress)) return snap.progress;
  if (isNum(snap.tokens) && isNum(snap.budget_tokens) && snap.budget_tokens > 0) {
    return snap.tokens / snap.budget_tokens;
  }
  return null;
}

export function createCockpit() {
  const loss = createLossCard();
  const figures = createFigures();
  return {
    el: el("div", { class: "tm-cockpit" }, loss.el, figures.el),
    update(snap, store, historyChanged) {
      loss.update(snap, store, historyChanged);
      figures.update(snap);
    },
    setTheme: (t) => loss.setTheme(t),
    destroy: () => loss.destroy(),
  };
}

/** The loss chart with its legend; the chart is re-created only when the set of series changes. */
function createLossCard() {
  const legend = el("div", { class: "tm-legend", testid: "tm-loss-legend" });
  const plot = el("div", { class: "tm-plot", testid: "tm-loss-chart" });
  const empty = el("div", { class: "tm-empty", text: "no loss reported yet" });
  const chartCard = el(
    "div",
    { class: "tm-card tm-chart-card" },
    el("div", { class: "tm-card-title", text: "loss" }),
    legend,
    el("div", { class: "tm-plot-wrap" }, plot, empty),
  );

  let chart = null;
  let chartKey = "";
  let lines = []; // [{name, label, kind: "raw"|"ema", color}]
  let data = [[]];
  let theme = null;

  function rebuild(spec) {
    chart?.destroy();
    chart = null;
    lines = [];
    const { train, others } = spec;
    if (train) {
      lines.push({ name: train, label: train, kind: "raw", color: 0, alpha: 0.45, width: 1 });
      lines.push({ name: train, label: `${train} (EMA)`, kind: "ema", color: 1, width: 2 });
    }
    others.forEach((n, i) => lines.push({ name: n, label: n, kind: "raw", color: 2 + i, width: 1.5 }));
    if (!lines.length) return;
    chart = createChart(plot, {
      series: lines.map((l) => ({ label: l.label, color: l.color, width: l.width, alpha: l.alpha })),
      theme,
      onCursor: (idx) => drawLegend(idx),
    });
  }

  // Legend: series names via textContent; values at the pointer, else the latest known values.
  let legendItems = [];
  let legendStep = null;
  let latest = [];
  function buildLegend() {
    legend.replaceChildren();
    legendItems = lines.map((l) => {
      const val = el("span", { class: "tm-legend-value" });
      const item = el(
        "span",
        { class: `tm-legend-item tm-legend-${l.kind}` },
        el("span", { class: `tm-swatch tm-swatch-${l.color}` }),
        el("span", { class: "tm-legend-name", text: l.label }),
        val,
      );
      legend.append(item);
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

  function updateChart(snap, store, historyChanged) {
    const spec = lossSeries([...store.series.keys()]);
    const key = JSON.stringify(spec);
    if (key !== chartKey) {
      chartKey = key;
      rebuild(spec);
      buildLegend();
      historyChanged = true;
    }
    empty.hidden = lines.length > 0 && lines.some((l) => (store.series.get(l.name)?.xs.length ?? 0) > 0);
    if (historyChanged && chart) {
      const cols = lines.map((l) => {
        const s = store.series.get(l.name);
        if (l.kind === "raw") return s;
        const given = store.series.get(`${l.name}_ema`);
        return given || { xs: s.xs, ys: ema(s.ys) };
      });
      data = align(cols);
      chart.setData(data);
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

  return {
    el: chartCard,
    update: updateChart,
    setTheme(t) {
      theme = t;
      chart?.setTheme(t);
    },
    destroy() {
      chart?.destroy();
      chart = null;
    },
  };
}

/** Tokens (against the budget), tokens/s, step time, ETA. */
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
  const stepTime = createFigure("step time", "tm-step-time");
  const eta = createFigure("ETA", "tm-eta");

  function update(snap) {
    const p = progressOf(snap);
    const budget = isNum(snap.budget_tokens) && snap.budget_tokens > 0 ? snap.budget_tokens : null;
    tokens.set(tokenCount(snap.tokens), {
      subText: budget ? `of ${tokenCount(budget, 3)} · ${percent(p)}` : "no token budget set",
    });
    bar.hidden = budget === null || !isNum(p);
    if (!bar.hidden) {
      const pct = Math.min(100, Math.max(0, p * 100));
      fill.style.width = `${pct}%`;
      setAttr(bar, "aria-valuenow", pct.toFixed(1));
    }

    rate.set(si(snap.tokens_per_s, "", 3), {
      unitText: isNum(snap.tokens_per_s) ? "tok/s" : "",
      subText: isNum(snap.tokens_per_s_avg) ? `avg ${si(snap.tokens_per_s_avg, "", 3)} tok/s` : "",
    });
    stepTime.set(duration(snap.step_time_s));

    const state = isObj(snap.run) ? str(snap.run.state) : "";
    const reached = budget && isNum(snap.progress) && snap.progress >= 1;
    if (ENDED.includes(state)) {
      // "done" only when the budget was reached; a run that stopped short says how far it got
      const short = budget && isNum(snap.progress) ? ` at ${(100 * snap.progress).toFixed(1)}% of budget` : "";
      eta.set(reached ? "done" : NA, { subText: `run ${state}${reached ? "" : short}` });
    }
    else if (!budget) eta.set(NA, { subText: "no token budget set" });
    else if (!isNum(snap.eta_s)) eta.set(NA, { subText: "measuring throughput" });
    else eta.set(duration(snap.eta_s), { subText: "to the token budget" });
  }

  return {
    el: el("div", { class: "tm-figures" }, tokens.el, rate.el, stepTime.el, eta.el),
    update,
  };
}

function lastValue(ys) {
  if (!ys) return null;
  for (let i = ys.length - 1; i >= 0; i--) if (ys[i] !== null && ys[i] !== undefined) return ys[i];
  return null;
}
