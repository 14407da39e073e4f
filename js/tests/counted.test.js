import assert from "node:assert/strict";
import test from "node:test";
import { countedText, countingText } from "../panels/efficiency.js";

test("the counted line gives FLOPs per token, the step, and a missing attention count", () => {
  const snap = { flops_per_token_counted: 5373952, flops_counted: { step: 3, attention: "sdpa" } };
  assert.match(countedText(snap), /^5\.37 MFLOP\/token \[counted\]: executed FLOPs of one real step \(step 3\), recompute included$/);
  const none = { ...snap, flops_counted: { step: 3, attention: "none counted" } };
  assert.match(countedText(none), /; no attention op counted$/);
  const sdpa = { ...snap, flops_counted: { step: 3, attention: "sdpa", not_counted: [] } };
  assert.match(countedText(sdpa), /recompute included$/);
  const matmul = { ...snap, flops_counted: { step: 3, attention: "matmul" } };
  assert.match(countedText(matmul), /recompute included; attention counted as batched matmuls$/);
  const missed = { ...snap, flops_counted: { step: 3, attention: "sdpa", not_counted: ["aten._int_mm (no FLOP formula)"] } };
  assert.match(countedText(missed), /recompute included; not counted: aten\._int_mm \(no FLOP formula\)$/);
  assert.equal(countedText({ flops_per_token_counted: null }), "[counted] executed FLOPs: not measured yet");
});

test("MFU says which tokens it counts", () => {
  assert.equal(countingText({ tokens_counting: "non-pad" }), "tokens: non-pad");
  assert.equal(countingText({ tokens_counting: "all positions" }), "tokens: all positions");
  assert.equal(countingText({}), "");
});
