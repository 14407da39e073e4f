import assert from "node:assert/strict";
import test from "node:test";
import {
  budgetOf,
  classifyLosses,
  costOverlay,
  figure,
  gpuField,
  gpuMean,
  gpuTitle,
  HOW_TO_BUDGET,
  mfuChartWhy,
  mfuFigure,
  mfuOverTime,
  ofuFigure,
  paramCounts,
  parsePrice,
  planVersus,
  RANK_SPLIT,
  rankRows,
  runConvention,
  shownConvention,
  splitReason,
  stragglerSet,
  timeShares,
  etaWhy,
  stateText,
} from "../derive.js";

// Roles as trainmeter/core/catalog.py `role` gives them (tests/unit/test_catalog.py pins those).
const ROLES = {
  train_loss_step: "train_loss", train_loss_epoch: null, val_loss: "val_loss", loss_scale: null,
  loss: "train_loss", train_loss: "train_loss", eval_loss: "val_loss", grad_norm: null, lr: null,
};
const seriesOf = (names) => Object.fromEntries(names.map((n) => [n, { value: 1, role: ROLES[n] ?? null }]));

test("Lightning's losses: the per-step train loss is primary; its epoch average and loss_scale are not losses", () => {
  const names = ["train_loss_epoch", "train_loss_step", "val_loss", "loss_scale"];
  assert.deepEqual(classifyLosses(names, seriesOf(names), { train_loss_epoch: 3, train_loss_step: 300, val_loss: 3, loss_scale: 300 }), {
    train: ["train_loss_step"],
    val: ["val_loss"],
  });
});

test("the Hugging Face Trainer's per-step loss leads its one-point train_loss summary; no role, no line", () => {
  const names = ["train_loss", "loss", "eval_loss", "grad_norm", "lr"];
  assert.deepEqual(classifyLosses(names, seriesOf(names), { train_loss: 1, loss: 80, eval_loss: 2 }), {
    train: ["loss", "train_loss"],
    val: ["eval_loss"],
  });
  assert.deepEqual(classifyLosses(["loss", "train_loss"], seriesOf(["loss", "train_loss"])).train, ["loss", "train_loss"]); // ties: by name
  assert.deepEqual(classifyLosses(["loss"], {}), { train: [], val: [] }); // not in the snapshot: no role
  assert.deepEqual(classifyLosses([], null), { train: [], val: [] });
});

test("MFU over time is the engine's mfu/<convention> series, drawn as it is", () => {
  const hf = { xs: [2, 3, 5], ys: [2.16e-4, null, 8.1e-5] };
  const series = new Map([["tokens_per_s", { xs: [2, 3, 5], ys: [40, 1, 30] }], ["mfu/hf", hf]]);
  assert.equal(mfuOverTime(series, "hf"), hf); // the same points, nothing recomputed
  assert.equal(mfuOverTime(series, "titan"), null); // none sent: no chart, never one from tokens/s
  assert.equal(mfuOverTime(new Map([["mfu/hf", { xs: [], ys: [] }]]), "hf"), null);
  assert.equal(mfuOverTime(undefined, "hf"), null);
  assert.equal(mfuOverTime(series, ""), null);
});

test("no MFU chart without a peak, and the reason is the core's", () => {
  const why = "no MFU: no dense peak is known for cpu; declare one with --peak";
  assert.equal(mfuChartWhy({ peak: null, reasons: { "mfu/titan": why } }, "titan"), why);
  assert.equal(mfuChartWhy({ peak: null }, "titan"), "not measured yet"); // no reason sent: no words made up
  const snap = { peak: { flops: 1e15 }, flops_per_token: { titan: 6e9 }, gpus: 8, reasons: { "mfu/hf": "no MFU: hf x" } };
  assert.equal(mfuChartWhy(snap, "titan"), "");
  assert.equal(mfuChartWhy(snap, "hf"), "no MFU: hf x");
  assert.equal(mfuChartWhy({ ...snap, gpus: undefined }, "titan"), ""); // devices are the engine's
});

test("the large MFU follows the convention picked in this view", () => {
  const snap = { convention: "titan", peak: { flops: 1e15 }, mfu: { titan: 0.41, hf: 0.38 }, flops_per_token: { titan: 1, hf: 1 } };
  assert.equal(runConvention(snap), "titan");
  assert.equal(shownConvention(snap, ""), "titan");
  assert.equal(shownConvention(snap, "hf"), "hf");
  assert.deepEqual(mfuFigure(snap, "hf"), { value: 0.38, why: "" });
  assert.equal(mfuFigure({ ...snap, peak: null, mfu: null }, "hf").value, null);
  const why = "not measured yet: needs two steps in one segment (the first is not timed)";
  assert.equal(mfuFigure({ ...snap, mfu: null, reasons: { "mfu/titan": why } }, "titan").why, why);
});

test("a figure the snapshot lacks shows the core's reason for it, as written", () => {
  // the engine's reasons for a record with every shape field but ffn (core/reasons.py; the
  // passport shows the same sentences: tests/unit/test_surfaces.py)
  const snap = {
    peak: { flops: 1e15 },
    mfu: { titan: 0.4, megatron: null },
    flops_per_token: { titan: 1, megatron: null },
    flops_spent: { titan: 10, megatron: null },
    reasons: {
      "flops_per_token/megatron": "n/a: megatron needs ffn, which the model record lacks",
      "flops_spent/megatron": "n/a: megatron needs ffn, which the model record lacks",
      "mfu/megatron": "no MFU: megatron needs ffn, which the model record lacks",
    },
  };
  assert.deepEqual(figure(snap, "flops_per_token", "megatron"), { value: null, why: snap.reasons["flops_per_token/megatron"] });
  assert.deepEqual(figure(snap, "flops_spent", "titan"), { value: 10, why: "" });
  assert.equal(mfuFigure(snap, "megatron").why, "no MFU: megatron needs ffn, which the model record lacks");
  assert.equal(mfuChartWhy(snap, "megatron"), "no MFU: megatron needs ffn, which the model record lacks");
  // a snapshot without reasons (none sent yet): the plain "not measured yet", no words made up
  assert.equal(figure({}, "step_time_s").why, "not measured yet");
});

test("price overlay: dollars = price × GPU-hours, kWh = J / 3.6e6, reasons when unknown", () => {
  const snap = { gpus: 8, gpu_hours: 12.5, gpu_hours_to_finish: 30, energy_j: 4.5e7 };
  const c = costOverlay(2.4, snap);
  assert.equal(c.spent.value, 30);
  assert.equal(c.toFinish.value, 72);
  assert.equal(c.kwh.value, 12.5);
  assert.equal(costOverlay("2.4", snap).spent.value, 30);

  const noPrice = costOverlay(null, snap);
  assert.equal(noPrice.spent.value, null);
  assert.match(noPrice.spent.why, /price/);
  assert.equal(noPrice.kwh.value, 12.5); // energy needs no price

  const reasons = {
    gpu_hours: "no GPUs: the run trained on cpu and declared no peak, so it counts no GPUs",
    energy_j: "not measured: it comes from the GPUs' NVML energy counter; no NVML",
    eta_s: "no ETA: no budget declared (--budget-tokens 20B or --budget-flops 1e18)",
  };
  const cpu = costOverlay(2.4, { gpus: 0, gpu_hours: null, gpu_hours_to_finish: null, energy_j: null, reasons });
  assert.equal(cpu.spent.value, null);
  assert.equal(cpu.spent.why, "no dollars: the run trained on cpu and declared no peak, so it counts no GPUs");
  assert.match(cpu.toFinish.why, /^no dollars/);
  assert.equal(cpu.kwh.why, reasons.energy_j); // the core's words

  const noBudget = costOverlay(2.4, { gpus: 1, gpu_hours: 1, gpu_hours_to_finish: null, budget_tokens: null, reasons });
  assert.equal(noBudget.spent.value, 2.4);
  assert.equal(noBudget.toFinish.why, "no dollars to finish: no budget declared (--budget-tokens 20B or --budget-flops 1e18)");
  assert.deepEqual(costOverlay(0, snap).spent, { value: 0, why: "" }); // a typed zero is a price
});

test("a typed price is a finite number >= 0, else none", () => {
  assert.equal(parsePrice("2.49"), 2.49);
  assert.equal(parsePrice(" 3 "), 3);
  assert.equal(parsePrice("0"), 0);
  for (const bad of ["", "  ", "-1", "abc", "1e999", null, undefined, Number.NaN, -2]) assert.equal(parsePrice(bad), null);
});

test("a GPU field the device cannot report says why, never zero", () => {
  const gpu = {
    gpu_util: 0.97,
    sm_active: null,
    tensor_active: 0,
    missing: { sm_active: "needs Hopper or newer", energy_j: "not supported by this driver" },
  };
  assert.deepEqual(gpuField(gpu, "gpu_util"), { value: 0.97, why: "" });
  assert.deepEqual(gpuField(gpu, "tensor_active"), { value: 0, why: "" }); // a measured zero is a zero
  // the core's reason as it wrote it: the front end adds no words ("not on this GPU" was wrong for
  // a reason such as "the run's dtype is not known yet")
  assert.deepEqual(gpuField(gpu, "sm_active"), { value: null, why: "needs Hopper or newer" });
  assert.deepEqual(gpuField(gpu, "energy_j"), { value: null, why: "not supported by this driver" });
  assert.deepEqual(gpuField(gpu, "power_w"), { value: null, why: "not measured yet" });
  assert.deepEqual(gpuField(null, "power_w"), { value: null, why: "not measured yet" });
});

test("a merged run's GPU card names the GPU's node and its index there", () => {
  const h100 = "NVIDIA H100 80GB HBM3";
  assert.equal(gpuTitle({ index: 0, name: h100, node: null, node_index: null }), `GPU 0 · ${h100}`);
  assert.equal(gpuTitle({ index: 2, name: h100, node: "node-b", node_index: 0 }), `GPU 2 (node-b GPU 0) · ${h100}`);
  assert.equal(gpuTitle({ index: 3, node: "node-b" }), "GPU 3 (node-b)");
});

test("a reason splits into a headline and the rest", () => {
  assert.deepEqual(splitReason("no MFU: no peak: x"), ["no MFU", "no peak: x"]);
  assert.deepEqual(splitReason("not measured yet"), ["not measured yet"]);
  assert.deepEqual(splitReason(null), ["n/a"]);
});

test("time split shares are the engine's time_share beside time_split's seconds, null until given", () => {
  assert.equal(timeShares(null, null), null);
  assert.equal(timeShares({ compute: 1, data: 1 }, null), null); // seconds, but no shares: none worked out
  // shares that are not the seconds' own quotients: shown as given, not recomputed
  const s = timeShares(
    { compute: 75, data: 15, checkpoint: 5, eval: 5, startup: 12, other: null },
    { compute: 0.6, data: 0.2, checkpoint: 0.05, eval: 0.05, startup: 0.1, other: null },
  );
  assert.deepEqual(
    s.map((p) => [p.key, p.seconds, p.share]),
    [["compute", 75, 0.6], ["data", 15, 0.2], ["checkpoint", 5, 0.05], ["eval", 5, 0.05], ["startup", 12, 0.1], ["other", null, null]],
  );
  // start-up is its own bucket: the time before the first step (imports, data, model build)
  assert.match(s.find((p) => p.key === "startup").title, /before the first step/);
});

test("per-rank rows in rank order, stragglers marked, unknown until measured", () => {
  const snap = {
    rank_step_time_s: { 10: 0.6, 2: 0.5, 0: 0.5 },
    rank_over_fastest: { 10: 0.2, 2: 0, 0: 0 },
    ranks: { 0: 100, 2: 100, 10: 98 },
    stragglers: [10],
  };
  const rows = rankRows(snap);
  assert.deepEqual(rows.map((r) => r.rank), ["0", "2", "10"]);
  assert.deepEqual(rows.map((r) => r.straggler), [false, false, true]);
  assert.deepEqual(rows.map((r) => r.overFastest), [0, 0, 0.2]); // the engine's, as given
  assert.equal(rows[2].steps, 98);
  // without the engine's figure there is none: never step time over the fastest worked out here
  assert.deepEqual(rankRows({ ...snap, rank_over_fastest: null }).map((r) => r.overFastest), [null, null, null]);
  assert.deepEqual(rankRows({ ...snap, stragglers: null }).map((r) => r.straggler), [null, null, null]);
  assert.equal(stragglerSet(null), null);
  assert.deepEqual([...stragglerSet({ 3: { slower: 0.2 } })], ["3"]);
  assert.deepEqual([...stragglerSet([{ rank: 5 }, 1])], ["5", "1"]);
});

test("per-rank rows carry the engine's lag, the job's wait, the rank's own split and the cause", () => {
  const snap = {
    ranks: { 0: 20, 1: 20 },
    rank_step_time_s: { 0: 0.1, 1: 0.1 },
    rank_lag_s: { 0: -0.001, 1: 0.029 },
    straggler_cost_s: { 0: 0, 1: 0.029 },
    straggler_share: { 0: 0, 1: 0.29 },
    // rank 1: 2 s compute, 1 s data wait, 0.5 s waiting for none; rank 0 waited 1.5 s for rank 1
    rank_time_split: { 0: { compute: 2, data: 0, checkpoint: 0, eval: 0, wait: 1.5, other: 0.5 }, 1: null },
    // the engine's shares of rank 0's 3.5 s in steps (its 0.5 s "other" left out)
    rank_time_share: { 0: { compute: 2 / 3.5, data: 0, checkpoint: 0, eval: 0, wait: 1.5 / 3.5 }, 1: null },
    stragglers: [1],
    straggler_rule: { 1: "lag" },
    straggler_cause: { 1: "rank 1: data loader (+29 ms/step data wait over the median rank)" },
  };
  const [r0, r1] = rankRows(snap);
  assert.deepEqual([r0.lag, r0.jobWait, r0.rule, r0.cause], [-0.001, 0, null, null]);
  assert.deepEqual([r1.lag, r1.jobWait, r1.jobWaitShare, r1.rule], [0.029, 0.029, 0.29, "lag"]);
  assert.match(r1.cause, /data loader/);
  assert.equal(r1.shares, null); // no span from rank 1 yet
  // rank 0's shares as the engine gave them, with its seconds, in RANK_SPLIT's order
  assert.deepEqual(r0.shares.map((p) => p.key), ["compute", "data", "checkpoint", "eval", "wait"]);
  assert.deepEqual(r0.shares.map((p) => p.key), RANK_SPLIT.map((p) => p.key));
  assert.deepEqual(r0.shares.map((p) => p.share), [2 / 3.5, 0, 0, 0, 1.5 / 3.5]);
  assert.deepEqual(r0.shares.map((p) => p.seconds), [2, 0, 0, 0, 1.5]);
  // seconds without the engine's shares: no bar worked out here
  assert.equal(rankRows({ ...snap, rank_time_share: null })[0].shares, null);
  assert.deepEqual(rankRows({ ranks: { 0: 1, 1: 1 } }).map((r) => [r.lag, r.shares]), [[null, null], [null, null]]);
});

test("the budget is tokens, or FLOPs in the run's convention, or how to declare one", () => {
  assert.deepEqual(budgetOf({ tokens: 5e8, budget_tokens: 2e9, progress: 0.25 }), {
    kind: "tokens",
    done: 5e8,
    total: 2e9,
    fraction: 0.25,
    conv: "",
    why: "",
  });
  // the fraction is the engine's progress_flops, as given
  const flops = { convention: "hf", budget_flops: 1e18, budget_tokens: 1e8, flops_spent: { hf: 2.5e17, titan: 3e17 }, progress_flops: 0.25 };
  assert.deepEqual(budgetOf(flops), { kind: "flops", done: 2.5e17, total: 1e18, fraction: 0.25, conv: "hf", why: "" });
  // no fraction from the engine: none is worked out here, and the engine's note on the budget says why
  const note = "budget: FLOPs declared but no FLOPs/token under hf yet, so no token budget, progress or ETA";
  const waiting = budgetOf({ ...flops, progress_flops: null, notes: ["something else", note] });
  assert.deepEqual([waiting.fraction, waiting.why], [null, note]);
  assert.equal(budgetOf({ tokens: 5e8, budget_tokens: 2e9 }).fraction, null);
  assert.equal(budgetOf({}).kind, null);
  assert.match(HOW_TO_BUDGET, /--budget-tokens 20B/);
  assert.match(HOW_TO_BUDGET, /--budget-flops 1e18/);
});

test("parameters with and without embeddings: the model's count and the engine's difference", () => {
  const model = { params: 1000, embedding_params: 200 };
  assert.deepEqual(paramCounts({ model, params_without_embeddings: 800 }), { all: 1000, withoutEmbeddings: 800 });
  assert.deepEqual(paramCounts({ model }), { all: 1000, withoutEmbeddings: null }); // not worked out here
  assert.deepEqual(paramCounts({ model: null }), { all: null, withoutEmbeddings: null });
});

test("the device line is the core's device_text: the run's own device, never a fake GPU's", async () => {
  const { deviceLine, hardwareText, dtypeText, demonstration } = await import("../derive.js");
  assert.equal(deviceLine({ device_text: "8 × NVIDIA H100 80GB HBM3", model: { device: "cpu" } }), "8 × NVIDIA H100 80GB HBM3");
  assert.equal(deviceLine({ model: { device: "cuda", device_name: "NVIDIA H100 80GB HBM3" } }), ""); // not worked out here
  // a CPU run on two fake H100s: its own device, the fake GPUs named a demonstration
  const demo = { backend: "fake:h100x2", gpus: 2, text: "demonstration: 2 × fake H100", banner: "demonstration, not a measurement: x" };
  const fake = { device_text: "cpu", gpus: 2, demonstration: demo, hardware: { backend: "fake:h100x2", gpus: [{ index: 0, name: "NVIDIA H100 80GB HBM3" }] } };
  assert.equal(hardwareText(fake), "cpu · demonstration: 2 × fake H100, not a measurement · counters: fake:h100x2");
  assert.deepEqual(demonstration(fake), { text: demo.text, banner: demo.banner });
  assert.equal(demonstration({ demonstration: null }), null);
  // the run's own dtype, and the peak's when --dtype declared another
  assert.equal(dtypeText({ dtype: "bf16", model: { run_dtype: "fp32" } }), "fp32 (the peak is read for bf16: --dtype)");
  assert.equal(dtypeText({ dtype: "fp32", model: { run_dtype: "fp32" } }), "fp32");
  assert.equal(dtypeText({}), "");
});

test("OFU and GPU-Util are the engine's means over the GPUs, with the core's reason when none has it", () => {
  const hw = { gpus: [{ index: 0, ofu: 0.5, observed_flops_per_s: 4e14 }, { index: 1, ofu: 0.3, observed_flops_per_s: 2e14 }] };
  // the engine's gpu_mean, as given (not the mean of the GPUs above, worked out here)
  const snap = { hardware: hw, gpu_mean: { gpu_util: 0.8, ofu: 0.41, observed_flops_per_s: 3.1e14, missing: {} } };
  assert.deepEqual(ofuFigure(snap), { value: 0.41, why: "", observed: 3.1e14 });
  assert.deepEqual(gpuMean(snap, "gpu_util"), { value: 0.8, why: "" });
  assert.deepEqual(ofuFigure({ hardware: hw }), { value: null, why: "not measured yet", observed: null });
  const why = "needs Hopper or newer (NVML GPM)";
  const a100 = { gpu_mean: { gpu_util: 0.6, ofu: null, observed_flops_per_s: null, missing: { ofu: why, observed_flops_per_s: why } } };
  assert.deepEqual(ofuFigure(a100), { value: null, why, observed: null });
  const none = "not measured yet: needs GPU counters (NVML GPM, Hopper or newer)";
  assert.equal(ofuFigure({ gpu_mean: { ofu: null, missing: { ofu: none } } }).why, none);
});

test("the state badge says the core's state_text when it gave one, else the state", () => {
  const text = "ended without a close (supervisor stopped at 14:03:27)";
  assert.equal(stateText({ state: "ended", state_text: text }), text);
  assert.equal(stateText({ state: "finished" }), "finished");
  assert.equal(stateText({ state: 3, state_text: ["x"] }), "");
  assert.equal(stateText(null), "");
  assert.equal(etaWhy({ reasons: { eta_s: "no ETA: the run ended without a close" } }), "the run ended without a close");
});

test("the plan against the achieved is the engine's plan_vs_actual, null where it has none", () => {
  const snap = { plan: { mfu: 0.4, tokens_per_s: 1000, eta_s: 60 }, tokens_per_s: 500, eta_s: 90 };
  // no plan_vs_actual: nothing worked out from the plan and the achieved figures here
  assert.deepEqual(planVersus(snap), { tokensPerS: null, mfu: null, etaLate: null });
  const given = { ...snap, plan_vs_actual: { tokens_per_s: 0.5, mfu: 0.75, eta_late_s: -3 } };
  assert.deepEqual(planVersus(given), { tokensPerS: 0.5, mfu: 0.75, etaLate: -3 });
});
