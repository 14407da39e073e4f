import assert from "node:assert/strict";
import test from "node:test";
import { countedText } from "../panels/efficiency.js";
import {
  countedPerUnit,
  hfuFact,
  hfuFigure,
  noTokensFact,
  noTokensWhy,
  perStepText,
  samplesFact,
  samplesRate,
  throughputFact,
} from "../samples.js";

// figures the engine gave, not worked out here: 3277.5 is not 480 / 0.146, nor 0.0098 2715648 x 3611 / 1e12
const WHY = "the model's inputs are not token ids (an image or feature batch), so no tokens, tokens/s or FLOPs per token apply";
const CNN = {
  tokens: 0, samples: 480, samples_per_step: 16, samples_per_s: 3611.1, samples_per_s_avg: 3277.5,
  tokens_missing: WHY, flops_per_token_counted: null, flops_per_sample_counted: 2715648,
  flops_counted: { step: 3, tokens: null, samples: 16, attention: "none counted" },
  hfu_counted: { value: 0.0098, avg: 0.0089, flops_per_s: 9.8e9, per: "sample", why: null },
  peak: { flops: 1e12 }, gpus: 1,
};

test("a run fed no token ids gives samples first and the engine's reason for tokens", () => {
  assert.equal(noTokensWhy(CNN), WHY);
  assert.equal(noTokensWhy({ tokens: 10, tokens_missing: null }), "");
  assert.equal(perStepText(CNN), "16 per step");
  assert.equal(perStepText({ samples_per_step: 12.5 }), "12.5 per step");
  assert.equal(perStepText({}), "");
});

test("samples/s is the snapshot's, with the samples per step and the run's average beside", () => {
  assert.deepEqual(samplesRate(CNN), { value: "3.61k", unit: "samples/s", sub: "16 per step · avg 3.28k samples/s", why: "" });
  assert.equal(samplesRate(CNN, false).sub, "avg 3.28k samples/s"); // the samples figure says the per step
  // no rate: the core's reason (core/reasons.py), as every surface says it
  const untimed = "not measured: the run had no two steps in one segment, so no step was timed";
  assert.deepEqual(samplesRate({ samples: 16, reasons: { samples_per_s: untimed } }), { value: null, unit: "", sub: "", why: untimed });
  // a snapshot without reasons: the plain headline, "yet" only while the run is open
  assert.equal(samplesRate({}).why, "not measured yet");
  assert.equal(samplesRate({ run: { state: "finished", ended: 1 } }).why, "not measured");
});

test("the counted line gives FLOPs per sample when the step had no tokens, per token when it had", () => {
  assert.deepEqual(countedPerUnit(CNN), { value: 2715648, unit: "FLOP/sample" });
  assert.match(countedText(CNN), /^2\.72 MFLOP\/sample \[counted\]: executed FLOPs of one real step \(step 3\), recompute included; no attention op counted$/);
  const gpt = { flops_per_token_counted: 5373952, flops_per_sample_counted: 687865856, flops_counted: { step: 3, attention: "sdpa" } };
  assert.match(countedText(gpt), /^5\.37 MFLOP\/token \[counted\]/);
  assert.equal(countedPerUnit({}), null);
  assert.match(countedText({}), /^\[counted\] executed FLOPs: /);
});

test("HFU [counted] is the engine's, says what it divides, and its reason when missing", () => {
  const h = hfuFigure(CNN);
  assert.equal(h.value, 0.0098);
  assert.equal(h.sub, "executed FLOPs per sample of the counted step × samples/s over 1.000 TFLOP/s; run average 0.89%; beside MFU, never in its place");
  const two = hfuFigure({ ...CNN, gpus: 2, hfu_counted: { ...CNN.hfu_counted, per: "token" } });
  assert.match(two.sub, /^executed FLOPs per token of the counted step × tokens\/s over 2 × 1\.000 TFLOP\/s;/);
  const none = { hfu_counted: { value: null, why: "no HFU: no dense peak is known; declare one with --peak" } };
  assert.deepEqual(hfuFigure(none), { value: null, why: "no HFU: no dense peak is known; declare one with --peak", sub: "" });
  assert.equal(hfuFigure({}).why, "not measured yet");
});

test("the passport panel gives samples, the reason for tokens, samples/s beside tokens/s and HFU [counted]", () => {
  assert.deepEqual(samplesFact(CNN), { text: "480", sub: "· 16 per step", muted: false });
  assert.deepEqual(samplesFact({}), { text: "not measured yet", sub: "", muted: true });
  assert.deepEqual(noTokensFact(CNN), { text: "n/a", sub: `(${WHY})`, muted: true });
  assert.equal(noTokensFact({ tokens: 40 }), null);
  // no tokens/s: the tokens' reason stays (as tm passport says it), samples/s after it
  const none = { text: `n/a: ${WHY}`, muted: true };
  assert.deepEqual(throughputFact(CNN, none), { ...none, sub: "· 3.28k samples/s (mean over the timed steps, not samples over elapsed time)" });
  const gpt = { samples_per_s_avg: 2.5 };
  assert.deepEqual(throughputFact(gpt, { text: "1.20k tok/s", sub: "(mean)" }), {
    text: "1.20k tok/s · 2.50 samples/s", sub: "(means over the timed steps, not counts over elapsed time)", muted: false,
  });
  assert.deepEqual(throughputFact({}, none), none);
  assert.deepEqual(hfuFact(CNN), { text: "0.89% [counted]", sub: "· run average; executed FLOPs, beside MFU", muted: false });
  assert.deepEqual(hfuFact({ hfu_counted: { avg: null, why: "no HFU: no dense peak is known; declare one with --peak" } }), {
    text: "no HFU: no dense peak is known; declare one with --peak", sub: "", muted: true,
  });
});
