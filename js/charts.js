// A thin wrapper around uPlot: create once, feed with setData at each redraw (never re-create per
// tick), follow the container's width with a ResizeObserver and the page's theme through colour
// functions that uPlot calls at draw time, and destroy everything on cleanup.

import uPlot from "uplot";

import { splitsFor, STEP_INCRS, stepRange, TIME_INCRS, tickLabels, timeLabels, timeUnit } from "./ticks.js";

/** @typedef {import("./contract.js").Theme} Theme */

const FALLBACK = {
  fg: "#57606a",
  grid: "rgba(128,128,128,0.18)",
  font: "system-ui, sans-serif",
  series: ["#1f77b4", "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"],
};

/**
 * Read the chart colours from CSS custom properties on `root` (style.css maps them onto the
 * JupyterLab theme, with fallbacks outside JupyterLab). Canvas cannot use var(), so this runs at
 * creation and again whenever the theme changes.
 */
export function readTheme(root) {
  const cs = getComputedStyle(root);
  const v = (name, fallback) => cs.getPropertyValue(name).trim() || fallback;
  return {
    fg: v("--tm-fg2", FALLBACK.fg),
    grid: v("--tm-grid", FALLBACK.grid),
    font: v("--tm-font", FALLBACK.font),
    series: FALLBACK.series.map((c, i) => v(`--tm-series-${i}`, c)),
  };
}

/** Chart height for a given width: flatter on wide screens, never tiny on narrow ones. */
export function chartHeight(width) {
  return Math.round(Math.min(240, Math.max(150, width * 0.42)));
}

/**
 * One line of a chart.
 * @typedef {object} Line
 * @property {string} label
 * @property {number} color index into the theme's series colours
 * @property {number} [width]
 * @property {number[]} [dash]
 * @property {number} [alpha]
 * @property {boolean} [points] draw each point (a sparse series: validation losses)
 */

/**
 * What a chart is made with (createChart).
 * @typedef {object} ChartOptions
 * @property {Line[]} series
 * @property {Theme | null} [theme] read from `container` when absent
 * @property {(idx: number | null) => void} [onCursor] the pointer moved over the plot (a custom legend)
 * @property {boolean} [yLog] a log-10 y axis (values must be > 0; the caller turns the others into gaps)
 * @property {[number, number] | ((min: number, max: number) => number[])} [yRange] fixed, or from the data's
 * @property {"step" | "time"} [x] what x is: optimizer steps (default; ticks on whole steps only)
 *   or seconds of the run (ticks on round seconds, minutes or hours, the unit in the axis label)
 * @property {string} [xLabel] the x axis's label (default "step", or "time (s)" / "(min)" / "(h)")
 * @property {string} [yLabel] the y axis's label with its unit: "loss", "MFU (%)", "tokens/s"
 * @property {(width: number) => number} [height] the chart's height for a width (default chartHeight)
 */

/**
 * A chart made by createChart; data is uPlot's aligned [xs, ys...].
 * @typedef {object} Chart
 * @property {(data: (number | null)[][]) => void} setData
 * @property {(theme: Theme) => void} setTheme
 * @property {() => void} destroy
 */

const Y_AXIS_MIN = 44; // px: room for "0.25" or "100%"
const LABEL_SIZE = 15; // px: an axis label's line (11 px text and its gap)

/**
 * The y axis's width: at least Y_AXIS_MIN, wider when its longest tick label needs it ("0.025"
 * would be cut at the left edge otherwise). uPlot asks again when the labels change.
 * @type {(u: uPlot, values: string[], axisIdx: number, cycleNum: number) => number}
 */
function yAxisSize(u, values, axisIdx, cycleNum) {
  const axis = u.axes[axisIdx];
  if (cycleNum > 1) return /** @type {any} */ (axis)._size; // settled: keep it, no resize loop
  const longest = (values ?? []).reduce((a, v) => (String(v).length > a.length ? String(v) : a), "");
  if (!longest) return Y_AXIS_MIN;
  u.ctx.font = /** @type {any} */ (axis).font[0];
  const text = u.ctx.measureText(longest).width / (globalThis.devicePixelRatio || 1);
  return Math.max(Y_AXIS_MIN, Math.ceil(text + (axis.ticks?.size ?? 4) + (axis.gap ?? 5) + 4));
}

/** The unit of a time axis now: from its scale's span (ticks.js timeUnit). */
const unitOf = (u) => timeUnit((u.scales.x.max ?? 0) - (u.scales.x.min ?? 0));

/**
 * The scales and the two axes' ticks and labels, without colours or sizes (createChart adds them):
 * whole-step ticks on a step axis, round times on a time axis, labels with uniform decimals on
 * both (ticks.js), and each axis's label with its unit.
 * @param {Pick<ChartOptions, "x" | "xLabel" | "yLabel" | "yLog" | "yRange">} options
 * @returns {{scales: Record<string, uPlot.Scale>, x: uPlot.Axis, y: uPlot.Axis, xName: string}}
 */
export function chartAxes({ x = "step", xLabel, yLabel, yLog = false, yRange }) {
  /** @type {uPlot.Scale} */
  const y = yLog ? { distr: 3, log: 10 } : {};
  if (yRange) y.range = typeof yRange === "function" ? (_u, min, max) => /** @type {uPlot.Range.MinMax} */ (yRange(min, max)) : yRange;
  /** @type {uPlot.Axis} */
  const yAxis = {
    label: yLabel,
    // A log axis's ticks are its own (1, 2, 5, 10, ...): only their labels are ours.
    ...(yLog ? {} : { splits: (_u, _i, min, max, incr) => splitsFor(min, max, incr) }),
    values: (_u, splits, _i, _space, incr) => tickLabels(splits, incr, { log: yLog }),
  };
  if (x === "time") {
    return {
      scales: { x: { time: false }, y },
      x: {
        label: xLabel ?? ((u) => `time (${unitOf(u).name})`),
        incrs: TIME_INCRS,
        splits: (_u, _i, min, max, incr) => splitsFor(min, max, incr),
        values: (u, splits, _i, _space, incr) => timeLabels(splits, incr, unitOf(u)),
      },
      y: yAxis,
      xName: "time (s)",
    };
  }
  return {
    scales: { x: { time: false, range: (_u, min, max) => stepRange(min, max) }, y },
    x: {
      label: xLabel ?? "step",
      incrs: STEP_INCRS,
      splits: (_u, _i, min, max, incr) => splitsFor(min, max, incr),
      values: (_u, splits, _i, _space, incr) => tickLabels(splits, incr),
    },
    y: yAxis,
    xName: "step",
  };
}

/**
 * Create a line chart in `container`.
 * @param {HTMLElement} container
 * @param {ChartOptions} options
 * @returns {Chart}
 */
export function createChart(container, { series, theme, onCursor, height = chartHeight, ...axesOptions }) {
  let t = theme || readTheme(container);
  const width = Math.max(container.clientWidth, 240);
  const style = (size) => ({
    stroke: () => t.fg,
    grid: { stroke: () => t.grid, width: 1 },
    ticks: { stroke: () => t.grid, width: 1, size: 4 },
    font: `11px ${t.font}`,
    labelFont: `11px ${t.font}`,
    labelSize: LABEL_SIZE,
    labelGap: 0,
    size,
  });
  const { scales, x, y, xName } = chartAxes(axesOptions);
  const opts = {
    width,
    height: height(width),
    legend: { show: false },
    // No drag-to-zoom: every live update resets the scales to the data, so a zoom would not stick.
    cursor: { drag: { x: false, y: false, setScale: false }, points: { size: 6 } },
    scales,
    axes: [
      { ...style(26), space: 60, ...x },
      { ...style(yAxisSize), space: 24, ...y },
    ],
    series: [
      { label: xName },
      ...series.map((s) => ({
        label: s.label,
        stroke: () => t.series[s.color % t.series.length],
        width: s.width ?? 1.5,
        dash: s.dash,
        alpha: s.alpha ?? 1,
        spanGaps: true,
        points: s.points ? { show: true, size: 5, width: 1, fill: () => t.series[s.color % t.series.length] } : { show: false },
      })),
    ],
    hooks: onCursor ? { setCursor: [(u) => onCursor(u.cursor.idx ?? null)] } : {},
  };
  const u = new uPlot(/** @type {uPlot.Options} */ (opts), [[], ...series.map(() => [])], container);

  // Only the width drives the size (the height follows it). The resize waits for the next frame:
  // resizing inside the observer's callback changes the observed box again in the same frame, which
  // browsers report as "ResizeObserver loop completed with undelivered notifications".
  let lastWidth = width;
  let frame = 0;
  const ro = new ResizeObserver((entries) => {
    const w = Math.floor(entries[0].contentRect.width);
    if (w <= 0 || w === lastWidth) return;
    lastWidth = w;
    cancelAnimationFrame(frame);
    frame = requestAnimationFrame(() => u.setSize({ width: lastWidth, height: height(lastWidth) }));
  });
  ro.observe(container);

  return {
    setData(data) {
      u.setData(/** @type {uPlot.AlignedData} */ (data));
    },
    setTheme(theme) {
      t = theme;
      u.redraw(false, true);
    },
    destroy() {
      cancelAnimationFrame(frame);
      ro.disconnect();
      u.destroy();
    },
  };
}
