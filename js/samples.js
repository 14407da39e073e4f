// Samples, FLOPs per sample and HFU [counted] (docs/spec.md "Samples, FLOPs per sample and HFU
// [counted]"): throughput for any model, not only one fed token ids. Pure functions over the
// snapshot, no DOM, read as the engine gave them: nothing here is worked out from other figures.
// HFU [counted] is executed FLOPs over the dense peak, always labelled so and never called MFU
// (the named-convention invariant); it sits beside MFU (the counters-beside invariant).

import { notMeasured, whyMissing } from "./derive.js";
import { count, isNum, percent, si } from "./format.js";

/** @typedef {import("./contract.js").Snapshot} Snapshot */

const isObj = (x) => x !== null && typeof x === "object" && !Array.isArray(x);
const str = (x) => (typeof x === "string" && x ? x : "");

/**
 * Why the run has no tokens, as the engine said it (`tokens_missing`: its steps fed samples and
 * no token ids, an image or feature batch), or "" for a run with tokens (or none yet).
 * @param {Snapshot} snap
 */
export function noTokensWhy(snap) {
  return str(snap.tokens_missing);
}

/**
 * "16 per step" from the engine's `samples_per_step` (a whole number as it is, else 3 digits);
 * "" when it has none.
 * @param {Snapshot} snap
 */
export function perStepText(snap) {
  const n = snap.samples_per_step;
  if (!isNum(n)) return "";
  return `${Number.isInteger(n) ? count(n) : si(n, "", 3)} per step`;
}

/**
 * The samples/s figure as the engine gave it: {value, unit, sub, why} ("3.28 k", "samples/s",
 * "16 per step · avg 3.05 k samples/s"), or value null and why, the core's reason ("not measured:
 * the run had no two steps in one segment, so no step was timed").
 * @param {Snapshot} snap
 * @param {boolean} [withPerStep] say the samples per step too (when no samples figure does)
 */
export function samplesRate(snap, withPerStep = true) {
  const avg = isNum(snap.samples_per_s_avg) ? `avg ${si(snap.samples_per_s_avg, "", 3)} samples/s` : "";
  const sub = [withPerStep ? perStepText(snap) : "", avg].filter(Boolean).join(" · ");
  if (isNum(snap.samples_per_s)) return { value: si(snap.samples_per_s, "", 3), unit: "samples/s", sub, why: "" };
  return { value: null, unit: "", sub: "", why: whyMissing(snap, "samples_per_s") };
}

/**
 * The counted step's executed FLOPs per token, else per sample (a model fed no token ids):
 * {value, unit} ("FLOP/token" or "FLOP/sample"), or null before the count.
 * @param {Snapshot} snap
 */
export function countedPerUnit(snap) {
  if (isNum(snap.flops_per_token_counted)) return { value: snap.flops_per_token_counted, unit: "FLOP/token" };
  if (isNum(snap.flops_per_sample_counted)) return { value: snap.flops_per_sample_counted, unit: "FLOP/sample" };
  return null;
}

/**
 * HFU [counted] as the engine gave it (`hfu_counted`): {value (a fraction), why, sub}; `why` is
 * the engine's reason when value is null, `sub` says what it divides and that it is not an MFU.
 * @param {Snapshot} snap
 */
export function hfuFigure(snap) {
  const h = isObj(snap.hfu_counted) ? snap.hfu_counted : {};
  const per = str(h.per) || "sample";
  const peak = isObj(snap.peak) && isNum(snap.peak.flops) ? snap.peak.flops : null;
  const gpus = isNum(snap.gpus) && snap.gpus > 1 ? `${snap.gpus} × ` : "";
  const over = peak !== null ? ` over ${gpus}${si(peak, "FLOP/s", 4)}` : "";
  const avg = isNum(h.avg) ? `; run average ${percent(h.avg)}` : "";
  const sub = `executed FLOPs per ${per} of the counted step × ${per}s/s${over}${avg}; beside MFU, never in its place`;
  if (isNum(h.value)) return { value: h.value, why: "", sub };
  return { value: null, why: str(h.why) || notMeasured(snap), sub: "" };
}


// ---------------------------------------------------------------------------------------------
// The passport panel's facts ({text, sub, muted}, as js/panels/passport.js shows them).

/**
 * The samples fed, with the samples per step: {text: "1,920", sub: "· 16 per step"}.
 * @param {Snapshot} snap
 */
export function samplesFact(snap) {
  if (!isNum(snap.samples)) return { text: whyMissing(snap, "samples"), sub: "", muted: true };
  const per = perStepText(snap);
  return { text: count(snap.samples), sub: per ? `· ${per}` : "", muted: false };
}

/**
 * The tokens fact of a run fed no token ids: "n/a" and the engine's reason; null for a run with
 * tokens (the panel shows its count).
 * @param {Snapshot} snap
 */
export function noTokensFact(snap) {
  const why = noTokensWhy(snap);
  return why ? { text: "n/a", sub: `(${why})`, muted: true } : null;
}

/**
 * The throughput fact with samples/s beside tokens/s (the run's means); a run without tokens/s
 * keeps its reason (the tokens' own, said as `tm passport` says it) with samples/s after it.
 * `tokens` is the panel's own tokens/s fact, returned as it is when the run has no samples/s.
 * @param {Snapshot} snap
 * @param {{text: string, sub?: string, muted?: boolean}} tokens
 */
export function throughputFact(snap, tokens) {
  if (!isNum(snap.samples_per_s_avg)) return tokens;
  const samples = `${si(snap.samples_per_s_avg, "", 3)} samples/s`;
  if (tokens.muted) return { ...tokens, sub: `· ${samples} (mean over the timed steps, not samples over elapsed time)` };
  return { text: `${tokens.text} · ${samples}`, sub: "(means over the timed steps, not counts over elapsed time)", muted: false };
}

/**
 * HFU [counted] over the whole run (`hfu_counted.avg`): "0.89% [counted]", or the engine's reason.
 * @param {Snapshot} snap
 */
export function hfuFact(snap) {
  const h = isObj(snap.hfu_counted) ? snap.hfu_counted : {};
  if (!isNum(h.avg)) return { text: str(h.why) || notMeasured(snap), sub: "", muted: true };
  return { text: `${percent(h.avg)} [counted]`, sub: "· run average; executed FLOPs, beside MFU", muted: false };
}
