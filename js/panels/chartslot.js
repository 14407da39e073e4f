// A chart slot: the block every chart of a panel needs, written once. A plot box, an optional title
// above it, and the uPlot chart (charts.js) in it: made again only when what it draws changes (its
// lines, a log axis), otherwise fed with setData; following the theme; gone with the panel. While
// there is nothing to draw, the box is one line that says why (the core's reason where it gives
// one), never an empty frame.

import { createChart } from "../charts.js";
import { el, setReason, setText } from "../dom.js";

/** @typedef {import("../contract.js").Theme} Theme */

/**
 * @typedef {object} ChartSlot
 * @property {HTMLElement} el the plot box, or the one-line message in its place
 * @property {HTMLElement | null} title the title line (null without `title`), placed by the panel
 * @property {(text: string) => void} setTitle
 * @property {(key: string, options: () => import("../charts.js").ChartOptions) => boolean} ensure
 *   a chart drawn with `options()` (its theme is the slot's): made anew when `key` differs from
 *   the last one's, else kept; true when it was made (its data must be set again)
 * @property {(data: (number | null)[][]) => void} setData the chart's data (uPlot's aligned columns)
 * @property {(reason: string) => void} say the message in the plot's place (the plot is hidden
 *   while it is shown); "" shows the plot again
 * @property {() => boolean} drawn whether a chart is there
 * @property {() => void} clear no chart (the message says why)
 * @property {(theme: Theme) => void} setTheme
 * @property {() => void} destroy
 */

/**
 * @param {object} [options]
 * @param {string} [options.title] a title line above the plot
 * @param {string} [options.empty] the message shown until `say` says otherwise
 * @param {boolean} [options.small] the smaller plot height (a chart among figures)
 * @param {string} [options.testid] on the plot box
 * @param {string} [options.plotTestid] on the plot itself (what a test finds the canvas in)
 * @returns {ChartSlot}
 */
export function createChartSlot({ title, empty = "", small = false, testid, plotTestid } = {}) {
  const plot = el("div", { class: "tm-plot", testid: plotTestid });
  // The message sits in an inner span, so that the spaces around a no-wrap flag span stay
  // (dom.js setReason).
  const why = el("span");
  const message = el("div", { class: "tm-empty" }, why);
  const box = el("div", { class: small ? "tm-plot-wrap tm-plot-wrap-small" : "tm-plot-wrap", testid }, plot, message);
  const titleNode = title === undefined ? null : el("div", { class: "tm-card-title", text: title });
  /** @type {import("../charts.js").Chart | null} */
  let chart = null;
  let key = "";
  /** @type {Theme | null} */
  let theme = null;

  const slot = {
    el: box,
    title: titleNode,
    setTitle(text) {
      if (titleNode) setText(titleNode, text);
    },
    ensure(next, options) {
      if (chart && next === key) return false;
      chart?.destroy();
      chart = createChart(plot, { ...options(), theme });
      key = next;
      return true;
    },
    setData(data) {
      chart?.setData(data);
    },
    say(reason) {
      setReason(why, reason);
      message.hidden = !reason;
      plot.hidden = Boolean(reason);
      box.classList.toggle("tm-plot-wrap-empty", Boolean(reason));
    },
    drawn: () => chart !== null,
    clear() {
      chart?.destroy();
      chart = null;
      key = "";
    },
    setTheme(t) {
      theme = t;
      chart?.setTheme(t);
    },
    destroy() {
      slot.clear();
    },
  };
  slot.say(empty);
  return slot;
}
