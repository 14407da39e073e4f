import assert from "node:assert/strict";
import test from "node:test";
import { conventionOf, flopsRequired, noteAbout, sortConventions } from "../panels/efficiency.js";

test("the snapshot's convention wins, else the first known one", () => {
  assert.equal(conventionOf({ convention: "titan", flops_per_token: { hf: 1 } }), "titan");
  assert.equal(conventionOf({ flops_per_token: { zeta: 1, megatron: 2, hf: 3 } }), "hf");
  assert.equal(conventionOf({}), "");
});

test("conventions sort in a fixed order, unknown ones last", () => {
  assert.deepEqual(sortConventions(["zeta", "titan", "hf"]), ["hf", "titan", "zeta"]);
});

test("the reason for a missing MFU comes from the notes", () => {
  const notes = ["something else", "no MFU: no peak is known for this device (cpu); declare one with --peak"];
  assert.match(noteAbout(notes, /mfu|peak/i), /^no MFU/);
  assert.equal(noteAbout(undefined, /mfu/i), "");
});

test("FLOPs required is the engine's flops_required, never budget times FLOPs per token here", () => {
  const snap = { budget_tokens: 2e7, flops_per_token: { titan: 5.3e6, hf: 5e6 }, flops_required: { titan: 1.06e14, hf: null } };
  assert.equal(flopsRequired(snap, "titan"), 1.06e14);
  assert.equal(flopsRequired(snap, "hf"), null); // the engine has none: none is worked out
  assert.equal(flopsRequired({ ...snap, flops_required: null }, "titan"), null);
});

test("FLOPs per token say the mean sequence length they are given at, when it is not the first batch's", async () => {
  const { seqLenText } = await import("../panels/efficiency.js");
  const varied = { flops_per_token_seq_len: 19.375, seq_len_mean: 19.375, model: { seq_len: 8 } };
  assert.equal(seqLenText(varied), "at the run's mean sequence length, 19.4 tokens (first batch 8)");
  const fixed = { flops_per_token_seq_len: 8, seq_len_mean: 8, model: { seq_len: 8 } };
  assert.equal(seqLenText(fixed), "");
  assert.equal(seqLenText({ flops_per_token_seq_len: 8, seq_len_mean: null, model: { seq_len: 8 } }), "");
});
