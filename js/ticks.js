// Axis ticks a person reads at a glance: pure functions (no DOM, no uPlot) that charts.js hands to
// uPlot, tested on their own (js/tests/ticks.test.js).
//
// - A step axis ticks on whole steps only (never 1.2): its increments are integers, its ticks
//   integer multiples of the increment, its range whole steps.
// - Every label of an axis has the same number of decimals, the fewest that tell neighbouring
//   ticks apart (5.550 5.555 5.560, or 5.55 5.56, never 5.558 5.555 5.55); large values share one
//   SI prefix (10k 20k 30k).
// - A time axis in seconds ticks on round seconds, minutes or hours and says which in its label.

const MAX_DECIMALS = 10;
const MAX_TICKS = 1000;

/** 1, 2, 5 (and 25) times powers of ten from 10^from to 10^to, ascending. */
function ladder(from, to, mantissas) {
  const out = [];
  for (let e = from; e <= to; e++) for (const m of mantissas) out.push(Number(`${m}e${e}`));
  return out;
}

/** Increments of a step axis: whole numbers only (1, 2, 5, 10, 20, 25, 50, ...). */
export const STEP_INCRS = [1, 2, 5, ...ladder(1, 15, [1, 2, 2.5, 5])];

/** Increments of a time axis in seconds: round seconds, minutes, hours, days. */
export const TIME_INCRS = [
  1, 2, 5, 10, 15, 30,
  60, 120, 300, 600, 900, 1800,
  3600, 7200, 10800, 21600, 43200,
  86400, 172800, 432000, 864000, 1728000, 4320000, 8640000,
]; // prettier-ignore

/**
 * The whole-step range of a step axis around the data's [min, max]: floor and ceil, and at least
 * one step wide (a single step is not a range uPlot can tick).
 * @param {number | null} min
 * @param {number | null} max
 * @returns {[number, number]}
 */
export function stepRange(min, max) {
  if (!Number.isFinite(min) || !Number.isFinite(max)) return [0, 1];
  const lo = Math.floor(min);
  const hi = Math.max(Math.ceil(max), lo + 1);
  return [lo, hi];
}

/**
 * The ticks of an axis whose increment is `incr`: the multiples of `incr` in [min, max], each
 * rounded to the increment's own decimals (no 0.30000000000000004); whole numbers when `incr` is.
 * @param {number} min
 * @param {number} max
 * @param {number} incr
 * @returns {number[]}
 */
export function splitsFor(min, max, incr) {
  if (!(incr > 0) || !Number.isFinite(min) || !Number.isFinite(max) || max < min) return [];
  const d = decimalsOf(incr);
  const first = Math.ceil(min / incr - 1e-9);
  const last = Math.floor(max / incr + 1e-9);
  const out = [];
  for (let k = first; k <= last && out.length < MAX_TICKS; k++) {
    const v = Number((k * incr).toFixed(d));
    out.push(Object.is(v, -0) ? 0 : v);
  }
  return out;
}

/**
 * The fewest decimals that write `x` exactly (0.25 -> 2, 2.5 -> 1, 500 -> 0), at most 10.
 * @param {number} x
 */
export function decimalsOf(x) {
  const a = Math.abs(x);
  if (!Number.isFinite(a) || a === 0) return 0;
  for (let d = 0; d < MAX_DECIMALS; d++) {
    const scaled = a * 10 ** d;
    if (Math.abs(scaled - Math.round(scaled)) <= 1e-9 * Math.max(1, scaled)) return d;
  }
  return MAX_DECIMALS;
}

const PREFIXES = ["", "k", "M", "G", "T", "P"];

/**
 * The labels of an axis's ticks: one SI prefix for the whole axis (from 10 000 up: 10k 20k), and
 * the same number of decimals on every label, the fewest that write the increment (the distance
 * between neighbours) exactly, or on a log axis, where ticks are not evenly spaced, every tick.
 * A null tick (one uPlot filtered out) gets "".
 * @param {(number | null)[]} splits
 * @param {number} incr the distance between neighbouring ticks (ignored when `log`)
 * @param {{log?: boolean, unit?: string}} [options] `unit` is appended to each label ("%")
 * @returns {string[]}
 */
export function tickLabels(splits, incr, { log = false, unit = "" } = {}) {
  const values = splits.filter((v) => typeof v === "number" && Number.isFinite(v));
  if (!values.length) return splits.map(() => "");
  const largest = Math.max(...values.map(Math.abs));
  const power = largest >= 1e4 ? Math.min(PREFIXES.length - 1, Math.floor(Math.log10(largest) / 3)) : 0;
  const scale = 10 ** (3 * power);
  const step = log || !(incr > 0) ? 0 : incr / scale;
  const d = step > 0 ? decimalsOf(step) : Math.max(...values.map((v) => decimalsOf(v / scale)));
  // A value within a millionth of the increment of zero is zero ("0.00", never "-0.00").
  const zero = step > 0 ? step * 1e-6 : 0;
  return splits.map((v) => {
    if (typeof v !== "number" || !Number.isFinite(v)) return "";
    const x = Math.abs(v / scale) <= zero ? 0 : v / scale;
    return `${x.toFixed(d)}${PREFIXES[power]}${unit}`;
  });
}

/**
 * The unit a time axis of `span` seconds is labelled in: seconds up to 10 minutes, minutes up to
 * 5 hours, hours beyond.
 * @param {number} span seconds from the axis's first to its last value
 * @returns {{name: string, seconds: number}}
 */
export function timeUnit(span) {
  if (!(span > 600)) return { name: "s", seconds: 1 };
  if (span <= 5 * 3600) return { name: "min", seconds: 60 };
  return { name: "h", seconds: 3600 };
}

/**
 * The labels of a time axis in seconds, in `unit` (timeUnit), with uniform decimals.
 * @param {(number | null)[]} splits seconds
 * @param {number} incr seconds
 * @param {{seconds: number}} unit
 */
export function timeLabels(splits, incr, unit) {
  return tickLabels(
    splits.map((v) => (typeof v === "number" ? v / unit.seconds : v)),
    incr / unit.seconds,
  );
}
