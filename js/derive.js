// Pure functions that turn a snapshot (docs/spec.md "Snapshot") into what the panels show. No DOM
// here, so node --test covers them. A figure the snapshot does not hold is never guessed: it comes
// back as {value: null, why: "plain reason"}, and the panel prints the reason, never a zero. The
// reason is the core's (the snapshot's `reasons`, trainmeter/core/reasons.py), shown as written:
// the page, the widget, `tm passport` and the summary line say the same words.
// Nothing here derives a figure from other figures: shares, ratios, means and fractions are the
// engine's snapshot keys (trainmeter/core/engine.py), read as given. The one exception is the
// view-time overlay (costOverlay): dollars at a price typed into this view, which must never
// reach the kernel or the log, so only the browser can multiply it.

import { isNum } from "./format.js";

/** @typedef {import("./contract.js").Series} Series */
/** @typedef {import("./contract.js").Snapshot} Snapshot */

export const isObj = (x) => x !== null && typeof x === "object" && !Array.isArray(x);
export const str = (x) => (typeof x === "string" && x ? x : "");
/** `obj[key]` when it is a number, else null. */
const num = (obj, key) => (isObj(obj) && isNum(obj[key]) ? obj[key] : null);

/** The named FLOPs conventions, in the order they are listed (docs/spec.md "FLOPs per token"). */
export const CONVENTIONS = ["hf", "megatron", "titan", "embeddings"];

export const NOT_MEASURED = "not measured yet";
/** The core's headline for what will not come now that the run has ended (core/reasons.py NOT). */
export const NEVER_MEASURED = "not measured";

/**
 * The run is still open: no `run.ended` and not ended without a close (the core's rule for when a
 * reason may say "yet", core/reasons.py). An empty snapshot (nothing received) is open.
 * @param {Snapshot} snap
 */
export function isOpen(snap) {
  const run = isObj(snap) && isObj(snap.run) ? snap.run : {};
  return !isNum(run.ended) && run.state !== "ended";
}

/**
 * The headline of a figure the core gave no reason for (a snapshot without `reasons`, a field the
 * sampler left without one): "not measured yet" while the run is open, "not measured" once it has
 * ended, as the core words it.
 * @param {Snapshot} snap
 */
export function notMeasured(snap) {
  return isOpen(snap) ? NOT_MEASURED : NEVER_MEASURED;
}

/**
 * A reason split into a short headline and the rest: "no MFU: no peak is known" -> ["no MFU",
 * "no peak is known"]; a reason with no ": " is all headline.
 */
export function splitReason(why) {
  const s = String(why || "n/a");
  const i = s.indexOf(": ");
  return i < 0 ? [s] : [s.slice(0, i), s.slice(i + 2)];
}

/** {value, why}: a known value, or null and the reason it is missing. */
export const known = (value) => ({ value, why: "" });
export const missing = (why) => ({ value: null, why });

/**
 * The core's reason a figure is missing (`reasons[key]`: "n/a: titan needs layers, heads, which
 * the model record lacks"), as written; "" when it gave none.
 * @param {Snapshot} snap
 * @param {string} key a key of docs/spec.md "Why a figure is missing" ("model", "mfu/titan", ...)
 */
export function reasonOf(snap, key) {
  return isObj(snap.reasons) ? str(snap.reasons[key]) : "";
}

/** The core's reason, or "not measured (yet)" for a snapshot that carries none (an empty one). */
const reason = (snap, key) => reasonOf(snap, key) || notMeasured(snap);

/**
 * The core's reason for `key` ("not measured: the run reported no training or validation loss
 * (...)"), else "not measured (yet)" (a snapshot without it): exported for the chart slots and
 * the facts that show a reason with no figure of their own (the loss chart, the plan).
 * @param {Snapshot} snap
 * @param {string} key
 */
export const whyMissing = (snap, key) => reason(snap, key);

/**
 * A figure of the snapshot as the panels show it: {value, why}, the value as given, or null and
 * the core's reason. `conv` names the convention of a by-convention key ("flops_spent", "mfu",
 * "flops_per_token", "mfu_avg", "model_flops_per_s_per_gpu": its reason is "<key>/<conv>").
 * @param {Snapshot} snap
 * @param {string} key
 * @param {string} [conv]
 */
export function figure(snap, key, conv) {
  const value = conv ? byConv(snap, key, conv) : isNum(snap[key]) ? snap[key] : null;
  return value !== null ? known(value) : missing(reason(snap, conv ? `${key}/${conv}` : key));
}

/**
 * A run on a fake GPU backend (a demonstration): {text, banner}, the core's words ("demonstration:
 * 2 × fake H100"; "demonstration, not a measurement: ..."), or null for a real run.
 * @param {Snapshot} snap
 */
export function demonstration(snap) {
  const d = isObj(snap.demonstration) ? snap.demonstration : null;
  return d && str(d.text) ? { text: d.text, banner: str(d.banner) || d.text } : null;
}

/**
 * A missing figure of one convention as `tm passport` and the summary line write it:
 * "n/a [titan] (titan needs ...)" (core/reasons.py `tagged`).
 */
export function tagged(why, conv) {
  const [head, ...rest] = splitReason(why);
  return rest.length ? `${head} [${conv}] (${rest.join(": ")})` : `${head} [${conv}]`;
}

/** Known conventions in a fixed order, then any others alphabetically. */
export function sortConventions(names) {
  const known = CONVENTIONS.filter((n) => names.includes(n));
  return known.concat(names.filter((n) => !CONVENTIONS.includes(n)).sort());
}

/**
 * The convention the run reports in: the snapshot's own, else the first it has figures for.
 * @param {Snapshot} snap
 */
export function runConvention(snap) {
  if (str(snap.convention)) return snap.convention;
  const fpt = isObj(snap.flops_per_token) ? Object.keys(snap.flops_per_token) : [];
  return fpt.length ? sortConventions(fpt)[0] : "";
}

/**
 * The convention this view shows large: the one picked in this view, else the run's.
 * @param {Snapshot} snap
 */
export function shownConvention(snap, picked) {
  return str(picked) || runConvention(snap);
}

/**
 * One convention's entry of a by-convention snapshot key (flops_spent, mfu, ...), or null.
 * @param {Snapshot} snap
 */
export function byConv(snap, key, conv) {
  const table = snap[key];
  return isObj(table) && isNum(table[conv]) ? table[conv] : null;
}

/** The first note that explains a missing figure, e.g. "no MFU: no dense peak is known for cpu". */
export function noteAbout(notes, pattern) {
  if (!Array.isArray(notes)) return "";
  return notes.find((n) => typeof n === "string" && pattern.test(n)) || "";
}

// ---------------------------------------------------------------------------------------------
// Loss series: which are validation, which are training (the engine's roles).

/**
 * The chart's losses from the role the engine gave each series (trainmeter/core/catalog.py
 * `role`, the one rule for which series is a training or a validation loss): {train, val}, each a
 * list of names. `series` is snapshot.series ({name: {role, ...}}); `sizes` is {name: points
 * held}. Training losses come with the most points first, so the primary one is the per-step loss
 * (Hugging Face's "loss" before its one-point "train_loss" summary), ties by name; validation
 * losses by name. A series without a role (loss_scale, Lightning's train_loss_epoch average) is
 * not a loss line.
 */
export function classifyLosses(names, series, sizes = {}) {
  const role = (n) => (isObj(series) && isObj(series[n]) ? series[n].role : null);
  const byName = (a, b) => (a < b ? -1 : a > b ? 1 : 0);
  const size = (n) => (isNum(sizes[n]) ? sizes[n] : 0);
  const train = names.filter((n) => role(n) === "train_loss").sort((a, b) => size(b) - size(a) || byName(a, b));
  const val = names.filter((n) => role(n) === "val_loss").sort(byName);
  return { train, val };
}

// ---------------------------------------------------------------------------------------------
// MFU over time: the engine's own series, drawn as it is.

/** The timeline series of MFU over time under convention `conv` (docs/spec.md "Snapshot keys
 * for the dashboard"): the engine's `mfu/<conv>`, the snapshot's MFU as it stood at each step. */
export const mfuSeriesName = (conv) => `mfu/${conv}`;

/**
 * MFU over time under `conv` from the store's series (a Map of name -> {xs, ys}, state.js): the
 * engine's `mfu/<conv>` points as they are (fractions; a gap stays a gap), or null when the
 * engine has sent none. Nothing is computed here.
 * @param {Map<string, Series>} series
 * @param {string} conv
 * @returns {Series | null}
 */
export function mfuOverTime(series, conv) {
  const s = series instanceof Map && conv ? series.get(mfuSeriesName(conv)) : null;
  return s && s.xs.length ? s : null;
}

/**
 * Why there is no MFU chart for convention `conv`, or "" when there can be one.
 * @param {Snapshot} snap
 */
export function mfuChartWhy(snap, conv) {
  const noPeak = !isObj(snap.peak) || !isNum(snap.peak.flops);
  if (noPeak || byConv(snap, "flops_per_token", conv) === null) return reason(snap, `mfu/${conv}`);
  return "";
}

/**
 * The large MFU figure for `conv`: {value (fraction), why}.
 * @param {Snapshot} snap
 */
export function mfuFigure(snap, conv) {
  const v = byConv(snap, "mfu", conv);
  if (v !== null && isObj(snap.peak)) return known(v);
  return missing(reason(snap, `mfu/${conv}`));
}

// ---------------------------------------------------------------------------------------------
// Overlays at view time: dollars at a typed price, kWh from the energy counter.

/** A price per GPU-hour typed by the viewer: a finite number >= 0, else null. */
export function parsePrice(text) {
  if (typeof text === "number") return isNum(text) && text >= 0 ? text : null;
  if (typeof text !== "string" || !text.trim()) return null;
  const x = Number(text.trim());
  return isNum(x) && x >= 0 ? x : null;
}

/**
 * Why a run has no GPU-hours (hence no dollars): the core's reason less its headline.
 * @param {Snapshot} snap
 */
function gpuHoursWhy(snap) {
  const [head, ...why] = splitReason(reason(snap, "gpu_hours"));
  return why.length ? why.join(": ") : head;
}

/**
 * The view-time overlays: {spent, toFinish, kwh}, each {value, why}. Dollars are
 * price × gpu_hours and price × gpu_hours_to_finish; kWh is energy_j / 3.6e6. The price is an
 * argument only: it is never stored and never sent anywhere.
 *
 * Computed here by design, not by the engine: the price is typed into this view and must never
 * reach the kernel, the supervisor or the run log (the physics-not-prices invariant), so the
 * multiplication can only happen in the browser. kWh is energy_j in another unit, not a new figure.
 */
export function costOverlay(price, snap) {
  const p = parsePrice(price);
  const noPrice = "enter a price per GPU-hour";
  let spent;
  if (!isNum(snap.gpu_hours)) spent = missing(`no dollars: ${gpuHoursWhy(snap)}`);
  else if (p === null) spent = missing(noPrice);
  else spent = known(p * snap.gpu_hours);

  let toFinish;
  if (isNum(snap.gpu_hours_to_finish)) toFinish = p === null ? missing(noPrice) : known(p * snap.gpu_hours_to_finish);
  else if (!isNum(snap.gpu_hours)) toFinish = missing(`no dollars: ${gpuHoursWhy(snap)}`);
  else toFinish = missing(`no dollars to finish: ${etaWhy(snap)}`);

  const kwhFig = isNum(snap.energy_j) ? known(snap.energy_j / 3.6e6) : missing(reason(snap, "energy_j"));
  return { spent, toFinish, kwh: kwhFig };
}

/** The run's state in words, as the core said it: `state_text` ("ended without a close
 * (supervisor stopped at 14:03:27)") when it gave one, else `state`; "" for none. The front end
 * never works the words out itself. */
export function stateText(run) {
  if (!isObj(run)) return "";
  return str(run.state_text) || str(run.state);
}

/**
 * Why there is no ETA: the core's reason less its "no ETA" headline ("no budget declared (...)").
 * @param {Snapshot} snap
 */
export function etaWhy(snap) {
  const [head, ...why] = splitReason(reason(snap, "eta_s"));
  return why.length ? why.join(": ") : head;
}

// ---------------------------------------------------------------------------------------------
// Budget and plan.

export const HOW_TO_BUDGET = "no budget declared: declare one with --budget-tokens 20B or --budget-flops 1e18";

/**
 * The declared budget against what is done. A FLOPs budget is counted in the run's convention
 * (docs/spec.md): {kind: "flops"|"tokens"|null, done, total, fraction, conv, why}. The fraction
 * is the engine's: `progress_flops` (FLOPs spent over the FLOPs budget) or `progress` (tokens over
 * the token budget); when it is null, `why` is the engine's note on the budget, if it wrote one.
 * @param {Snapshot} snap
 */
export function budgetOf(snap) {
  const conv = runConvention(snap);
  const why = (fraction) => (fraction === null ? noteAbout(snap.notes, /^budget:/) : "");
  if (isNum(snap.budget_flops) && snap.budget_flops > 0) {
    const done = byConv(snap, "flops_spent", conv);
    const fraction = isNum(snap.progress_flops) ? snap.progress_flops : null;
    return { kind: "flops", done, total: snap.budget_flops, fraction, conv, why: why(fraction) };
  }
  if (isNum(snap.budget_tokens) && snap.budget_tokens > 0) {
    const done = isNum(snap.tokens) ? snap.tokens : null;
    const fraction = isNum(snap.progress) ? snap.progress : null;
    return { kind: "tokens", done, total: snap.budget_tokens, fraction, conv, why: why(fraction) };
  }
  return { kind: null, done: null, total: null, fraction: null, conv, why: "" };
}

/**
 * FLOPs to reach the budget under `conv`: the snapshot's flops_required (the engine fills it for
 * every convention with FLOPs per token whenever there is a budget), else null.
 * @param {Snapshot} snap
 */
export function flopsRequired(snap, conv) {
  return byConv(snap, "flops_required", conv);
}

/**
 * The run against its plan, as the engine gave it (`plan_vs_actual`): {tokensPerS, mfu} achieved
 * over planned (1.0 = on plan) and etaLate (s, above 0: later than planned); null where unknown.
 * @param {Snapshot} snap
 */
export function planVersus(snap) {
  const v = isObj(snap.plan_vs_actual) ? snap.plan_vs_actual : {};
  return { tokensPerS: num(v, "tokens_per_s"), mfu: num(v, "mfu"), etaLate: num(v, "eta_late_s") };
}

// ---------------------------------------------------------------------------------------------
// Hardware.

export const LADDER = [
  { field: "gpu_util", label: "GPU-Util" },
  { field: "sm_active", label: "SM activity" },
  { field: "sm_occupancy", label: "SM occupancy" },
  { field: "tensor_active", label: "tensor-pipe activity" },
];

/**
 * One field of one GPU's sample: {value, why}. A field the core could not give is null with its
 * reason in `missing`, shown as the core wrote it ("not on this GPU: needs Hopper or newer (NVML
 * GPM)", "the run's dtype is not known yet (no peak to compare with)", "not sampled"); a field
 * with no reason says `fallback` (notMeasured: "not measured yet" while the run is open, "not
 * measured" once it has ended). Never a zero in place of an unknown.
 */
export function gpuField(gpu, field, fallback = NOT_MEASURED) {
  if (!isObj(gpu)) return missing(fallback);
  if (isNum(gpu[field])) return known(gpu[field]);
  const reason = isObj(gpu.missing) ? str(gpu.missing[field]) : "";
  if (reason) return missing(reason);
  return missing(fallback);
}

/**
 * A GPU card's title: "GPU 2 · NVIDIA H100 80GB HBM3", and in a merged run (tm merge), whose GPUs
 * are renumbered across nodes, the GPU's node and its index there: "GPU 2 (node-b GPU 0) · ...".
 */
export function gpuTitle(gpu) {
  if (!isObj(gpu)) return "GPU";
  const node = str(gpu.node) ? ` (${gpu.node}${isNum(gpu.node_index) ? ` GPU ${gpu.node_index}` : ""})` : "";
  return `GPU ${gpu.index}${node}${str(gpu.name) ? ` · ${gpu.name}` : ""}`;
}

/** The GPUs of a hardware sample, in index order; [] when there is none. */
export function gpusOf(hardware) {
  if (!isObj(hardware) || !Array.isArray(hardware.gpus)) return [];
  return hardware.gpus
    .filter(isObj)
    .map((g, i) => ({ ...g, index: isNum(g.index) ? g.index : i }))
    .sort((a, b) => a.index - b.index);
}

/**
 * One of the engine's means over the run's GPUs (`gpu_mean`: `gpu_util`, `ofu`,
 * `observed_flops_per_s`): {value, why}, the reason as the core wrote it when no GPU has it.
 * @param {Snapshot} snap
 * @param {"gpu_util" | "ofu" | "observed_flops_per_s"} field
 */
export function gpuMean(snap, field) {
  const mean = isObj(snap.gpu_mean) ? snap.gpu_mean : null;
  if (mean && isNum(mean[field])) return known(mean[field]);
  const reason = mean && isObj(mean.missing) ? str(mean.missing[field]) : "";
  return missing(reason || notMeasured(snap));
}

/**
 * OFU across the run's GPUs: the engine's mean of each GPU's `ofu` (tensor-pipe activity from
 * NVML GPM, a counter), with its mean observed FLOP/s per GPU. Shown beside MFU, never in its
 * place (the counters-beside invariant). {value, why, observed}.
 * @param {Snapshot} snap
 */
export function ofuFigure(snap) {
  const ofu = gpuMean(snap, "ofu");
  return { ...ofu, observed: ofu.value === null ? null : gpuMean(snap, "observed_flops_per_s").value };
}

/**
 * Why the hardware panel is empty (hardware is null).
 * @param {Snapshot} snap
 */
export function hardwareWhy(snap) {
  return reason(snap, "hardware");
}

// ---------------------------------------------------------------------------------------------
// Where the time goes.

export const SPLIT = [
  { key: "compute", label: "compute" },
  { key: "data", label: "data wait" },
  { key: "checkpoint", label: "checkpoint" },
  { key: "eval", label: "eval" },
  { key: "startup", label: "start-up", title: "before the first step: imports, data, model build" },
  { key: "other", label: "other" },
];

/**
 * A split of seconds by bucket with the engine's shares of it: time_split with time_share, or one
 * rank's rank_time_split and rank_time_share entries over RANK_SPLIT. [{key, label, seconds,
 * share}], or null while the engine gives no shares.
 */
export function timeShares(split, shares, buckets = SPLIT) {
  if (!isObj(shares)) return null;
  return buckets.map((p) => ({ ...p, seconds: num(split, p.key), share: num(shares, p.key) }));
}

/**
 * The ranks flagged as stragglers, as a Set of rank strings, or null while not measured. Accepts a
 * list of ranks ([3, 5]) or an object keyed by rank ({"3": {...}}).
 */
export function stragglerSet(stragglers) {
  if (Array.isArray(stragglers)) {
    return new Set(stragglers.map((r) => (isObj(r) ? r.rank : r)).filter((r) => isNum(r) || str(r)).map(String));
  }
  if (isObj(stragglers)) return new Set(Object.keys(stragglers));
  return null;
}

/**
 * One rank's buckets of step time, in the order drawn: compute, data wait, checkpoint, eval and
 * the wait for other ranks (its start-up and "other", time outside steps, are left out).
 */
export const RANK_SPLIT = [...SPLIT.slice(0, 4), { key: "wait", label: "waiting for other ranks" }];

/**
 * Per-rank rows, in rank order: [{rank, stepTime, steps, overFastest, lag, jobWait, jobWaitShare,
 * shares, straggler, rule, cause}]. All are the engine's own figures (trainmeter/core/ranks.py),
 * null where it has none: overFastest (rank_over_fastest: how much longer the rank's steps are
 * than the fastest rank's, 0 for the fastest), lag (rank_lag_s), jobWait (straggler_cost_s),
 * jobWaitShare (straggler_share), shares (rank_time_split's seconds with rank_time_share's
 * shares, over RANK_SPLIT), rule and cause (straggler_rule, straggler_cause).
 * @param {Snapshot} snap
 */
export function rankRows(snap) {
  const times = isObj(snap.rank_step_time_s) ? snap.rank_step_time_s : {};
  const steps = isObj(snap.ranks) ? snap.ranks : {};
  const names = [...new Set([...Object.keys(times), ...Object.keys(steps)])];
  names.sort((a, b) => Number(a) - Number(b) || (a < b ? -1 : a > b ? 1 : 0));
  const flagged = stragglerSet(snap.stragglers);
  const splits = isObj(snap.rank_time_split) ? snap.rank_time_split : {};
  const shares = isObj(snap.rank_time_share) ? snap.rank_time_share : {};
  const rules = isObj(snap.straggler_rule) ? snap.straggler_rule : {};
  const causes = isObj(snap.straggler_cause) ? snap.straggler_cause : {};
  return names.map((rank) => {
    const t = isNum(times[rank]) ? times[rank] : null;
    return {
      rank,
      stepTime: t,
      steps: isNum(steps[rank]) ? steps[rank] : null,
      overFastest: num(snap.rank_over_fastest, rank),
      lag: num(snap.rank_lag_s, rank),
      jobWait: num(snap.straggler_cost_s, rank),
      jobWaitShare: num(snap.straggler_share, rank),
      shares: timeShares(splits[rank], shares[rank], RANK_SPLIT),
      straggler: flagged ? flagged.has(rank) : null,
      rule: str(rules[rank]) || null,
      cause: str(causes[rank]) || null,
    };
  });
}

// ---------------------------------------------------------------------------------------------
// Run passport.

/**
 * Parameters with and without embeddings: {all, withoutEmbeddings}, the model record's `params`
 * and the engine's `params_without_embeddings`; null where unknown.
 * @param {Snapshot} snap
 */
export function paramCounts(snap) {
  const model = isObj(snap.model) ? snap.model : null;
  if (!model || !isNum(model.params)) return { all: null, withoutEmbeddings: null };
  return { all: model.params, withoutEmbeddings: isNum(snap.params_without_embeddings) ? snap.params_without_embeddings : null };
}

/**
 * The device the run trained on, as the core names it (`device_text`): "2 × NVIDIA H100 80GB
 * HBM3", "cpu"; never a fake GPU's (`demonstration` names those); "" when nothing named one.
 * @param {Snapshot} snap
 */
export function deviceLine(snap) {
  return str(snap.device_text);
}

/**
 * The run's own dtype (the agent's), and the one its peak is read for when that differs
 * (`--dtype`): "fp32 (the peak is read for bf16: --dtype)", as `tm passport` writes it
 * (core/passport_md.py `dtype_text`); "" when neither is known.
 * @param {Snapshot} snap
 */
export function dtypeText(snap) {
  const m = isObj(snap.model) ? snap.model : {};
  const peakDtype = str(snap.dtype);
  const own = str(m.run_dtype) || peakDtype;
  return own && peakDtype && own !== peakDtype ? `${own} (the peak is read for ${peakDtype}: --dtype)` : own;
}

/**
 * The hardware as `tm passport` writes it (core/passport_md.py `_hardware_md`): the run's own
 * device, "(0 GPUs counted)", a demonstration's fake GPUs, the counters' backend and a merged
 * run's GPUs by node: "cpu · demonstration: 2 × fake H100, not a measurement · counters:
 * fake:h100x2"; "" when neither a device nor fake GPUs are named.
 * @param {Snapshot} snap
 */
export function hardwareText(snap) {
  const device = deviceLine(snap);
  const demo = demonstration(snap);
  if (!device && !demo) return "";
  const backend = isObj(snap.hardware) ? str(snap.hardware.backend) : "";
  const gpus = isObj(snap.hardware) && Array.isArray(snap.hardware.gpus) ? snap.hardware.gpus : [];
  const perNode = new Map(); // a merged run: its GPUs per node, in the order listed
  for (const g of gpus) if (isObj(g) && str(g.node)) perNode.set(g.node, (perNode.get(g.node) || 0) + 1);
  return [
    device ? `${device}${snap.gpus === 0 ? " (0 GPUs counted)" : ""}` : "",
    demo ? `${demo.text}, not a measurement` : "",
    backend ? `counters: ${backend}` : "",
    perNode.size ? `GPUs by node: ${[...perNode].map(([n, k]) => `${n} ${k}`).join(", ")}` : "",
  ]
    .filter(Boolean)
    .join(" · ");
}
