import assert from "node:assert/strict";
import test from "node:test";

import { chartAxes } from "../charts.js";
import { decimalsOf, splitsFor, STEP_INCRS, stepRange, TIME_INCRS, tickLabels, timeLabels, timeUnit } from "../ticks.js";

/**
 * What uPlot does with an axis (findIncr, then splits, then values): the smallest increment of
 * `incrs` whose ticks are at least `space` px apart over `dim` px, the axis's ticks at it, and
 * their labels. A stand-in for uPlot's own loop, so the axis options can be tried on any range.
 */
function ticksOf(axis, min, max, dim, space = 60, u = {}) {
  const incr = axis.incrs.find((i) => (dim * i) / (max - min) >= space);
  const splits = axis.splits(u, 0, min, max, incr, space);
  return { incr, splits, labels: axis.values(u, splits, 0, space, incr) };
}

/** A label's value: "0.5M" -> 500000. */
const valueOf = (label) => Math.round(parseFloat(label) * ({ k: 1e3, M: 1e6, G: 1e9 }[label.slice(-1)] ?? 1));
const uniformDecimals = (labels) => new Set(labels.map((l) => (l.match(/\.(\d+)/)?.[1] ?? "").length)).size === 1;

test("a step axis ticks on whole steps only, whatever its range and width", () => {
  const { x, scales } = chartAxes({});
  assert.equal(x.label, "step");
  for (const [lo, hi] of [[1, 2], [0, 1], [1, 5], [3, 7], [1, 93], [0, 150], [17, 23], [0, 1e6], [999_990, 1_000_010]]) {
    for (const dim of [150, 240, 500, 900, 1400]) {
      const [min, max] = /** @type {any} */ (scales.x.range)(null, lo, hi);
      const { incr, splits, labels } = ticksOf(x, min, max, dim);
      assert.ok(Number.isInteger(incr) && incr >= 1, `[${lo}, ${hi}] at ${dim} px: increment ${incr}`);
      assert.ok(splits.length > 0, `[${lo}, ${hi}] at ${dim} px: no tick`);
      for (const s of splits) assert.ok(Number.isInteger(s) && s >= min && s <= max, `[${lo}, ${hi}] at ${dim} px: tick ${s}`);
      for (const l of labels) assert.ok(Number.isInteger(valueOf(l)), `[${lo}, ${hi}] at ${dim} px: label ${l}`);
      assert.ok(uniformDecimals(labels), `[${lo}, ${hi}] at ${dim} px: ${labels.join(" ")}`);
    }
  }
  // The range that gave 1.2, 1.4, ... 2: two steps on a wide chart.
  assert.deepEqual(ticksOf(x, 1, 2, 600).labels, ["1", "2"]);
});

test("step increments are whole numbers; the range is whole steps, at least one wide", () => {
  for (const i of STEP_INCRS) assert.ok(Number.isInteger(i) && i >= 1, String(i));
  assert.deepEqual(STEP_INCRS.slice(0, 8), [1, 2, 5, 10, 20, 25, 50, 100]);
  assert.deepEqual(stepRange(1.2, 7.6), [1, 8]);
  assert.deepEqual(stepRange(5, 5), [5, 6]);
  assert.deepEqual(stepRange(null, null), [0, 1]);
  assert.deepEqual(splitsFor(0.5, 7.5, 2), [2, 4, 6]);
  assert.deepEqual(splitsFor(-3, 3, 1), [-3, -2, -1, 0, 1, 2, 3]);
});

test("every label of an axis has the same decimals, enough to tell neighbours apart", () => {
  // The loss axis that read 5.558, 5.555, 5.55.
  assert.deepEqual(tickLabels([5.55, 5.555, 5.56], 0.005), ["5.550", "5.555", "5.560"]);
  assert.deepEqual(tickLabels([5.55, 5.56, 5.57], 0.01), ["5.55", "5.56", "5.57"]);
  assert.deepEqual(tickLabels([2, 2.5, 3, 3.5], 0.5), ["2.0", "2.5", "3.0", "3.5"]);
  assert.deepEqual(tickLabels([0, 25, 50, 75, 100], 25), ["0", "25", "50", "75", "100"]);
  assert.deepEqual(tickLabels([0, 0.01, 0.02, 0.03], 0.01), ["0.00", "0.01", "0.02", "0.03"]);
  assert.deepEqual(tickLabels([0, 0.025, 0.05], 0.025), ["0.000", "0.025", "0.050"]);
  // Floating-point noise in a tick is not a decimal of its own; no "-0.00".
  assert.deepEqual(tickLabels([0.1 + 0.2, 0.4, -1e-18], 0.1), ["0.3", "0.4", "0.0"]);
  // Large values share one prefix.
  assert.deepEqual(tickLabels([0, 10_000, 20_000, 30_000], 10_000), ["0k", "10k", "20k", "30k"]);
  assert.deepEqual(tickLabels([10_000, 12_500, 15_000], 2_500), ["10.0k", "12.5k", "15.0k"]);
  assert.deepEqual(tickLabels([0, 500_000, 1_000_000, 1_500_000], 500_000), ["0.0M", "0.5M", "1.0M", "1.5M"]);
  assert.deepEqual(tickLabels([5000, 7500], 2500), ["5000", "7500"]);
  // A null tick (filtered out by uPlot) has no label; a log axis's uneven ticks still share decimals.
  assert.deepEqual(tickLabels([1, null, 3], 1), ["1", "", "3"]);
  assert.deepEqual(tickLabels([0.8, 0.9, 1, 2, 3], 0, { log: true }), ["0.8", "0.9", "1.0", "2.0", "3.0"]);
  assert.deepEqual(tickLabels([], 1), []);
});

test("a linear y axis's labels have uniform decimals at any range", () => {
  const { y } = chartAxes({ yLabel: "loss" });
  assert.equal(y.label, "loss");
  const incrs = [1e-4, 2e-4, 2.5e-4, 5e-4, 1e-3, 2e-3, 2.5e-3, 5e-3, 0.01, 0.02, 0.025, 0.05, 0.1, 0.2, 0.25, 0.5, 1, 2, 2.5, 5, 10, 20, 25, 50, 100];
  for (const [lo, hi] of [[5.548, 5.561], [2.3741, 2.3745], [0, 0.0483], [2.1, 5.6], [0, 100], [0.93, 1.07], [-0.2, 0.3]]) {
    for (const dim of [80, 150, 240]) {
      const { splits, labels } = ticksOf({ ...y, incrs }, lo, hi, dim, 24);
      assert.ok(uniformDecimals(labels), `[${lo}, ${hi}] at ${dim} px: ${labels.join(" ")}`);
      assert.equal(new Set(labels).size, labels.length, `[${lo}, ${hi}] at ${dim} px: neighbours alike: ${labels.join(" ")}`);
      assert.equal(labels.length, splits.length);
    }
  }
});

test("decimals of an increment", () => {
  assert.equal(decimalsOf(0.25), 2);
  assert.equal(decimalsOf(2.5), 1);
  assert.equal(decimalsOf(500), 0);
  assert.equal(decimalsOf(0.005), 3);
  assert.equal(decimalsOf(0.1 * 3), 1);
  assert.equal(decimalsOf(0), 0);
});

test("a time axis is in seconds, minutes or hours, and says which", () => {
  assert.deepEqual(timeUnit(90), { name: "s", seconds: 1 });
  assert.deepEqual(timeUnit(600), { name: "s", seconds: 1 });
  assert.deepEqual(timeUnit(1800), { name: "min", seconds: 60 });
  assert.deepEqual(timeUnit(8 * 3600), { name: "h", seconds: 3600 });
  assert.deepEqual(timeLabels([0, 300, 600, 900], 300, timeUnit(1000)), ["0", "5", "10", "15"]);
  assert.deepEqual(timeLabels([0, 1800, 3600], 1800, timeUnit(30000)), ["0.0", "0.5", "1.0"]);
  for (const i of TIME_INCRS) assert.ok(Number.isInteger(i) && i >= 1, String(i));

  const { x } = chartAxes({ x: "time" });
  const at = (min, max) => ({ scales: { x: { min, max } } });
  assert.equal(/** @type {Function} */ (x.label)(at(0, 90)), "time (s)");
  assert.equal(/** @type {Function} */ (x.label)(at(0, 3600)), "time (min)");
  const { splits, labels } = ticksOf(x, 0, 90.4, 500, 60, at(0, 90.4));
  assert.deepEqual(splits, [0, 15, 30, 45, 60, 75, 90]);
  assert.equal(labels[1], "15");
  const long = ticksOf(x, 0, 3600, 500, 60, at(0, 3600));
  assert.ok(long.labels.every((l) => /^\d+$/.test(l)), long.labels.join(" "));
});

test("every chart's axes carry labels: step on x by default, the y label given", () => {
  assert.equal(chartAxes({}).xName, "step");
  assert.equal(chartAxes({ x: "time" }).xName, "time (s)");
  assert.equal(chartAxes({ yLabel: "MFU (%)" }).y.label, "MFU (%)");
  // A log y axis keeps uPlot's own ticks (1, 2, 5, 10) and gets uniform labels.
  const log = chartAxes({ yLog: true });
  assert.equal(log.y.splits, undefined);
  assert.equal(log.scales.y.distr, 3);
});
