import assert from "node:assert/strict";
import test from "node:test";
import { lossLines, progressOf } from "../panels/cockpit.js";

test("the loss chart draws the training loss raw and smoothed, validation losses with points", () => {
  const lines = lossLines(["lr", "val_loss", "train_loss", "aux_loss"]);
  assert.deepEqual(
    lines.map((l) => [l.label, l.kind, l.val, Boolean(l.points), l.color]),
    [
      ["train_loss", "raw", false, false, 0],
      ["train_loss (EMA)", "ema", false, false, 1],
      ["val_loss", "raw", true, true, 2],
      ["aux_loss", "raw", false, false, 3],
    ],
  );
  assert.deepEqual(lossLines(["eval/loss"]).map((l) => l.label), ["eval/loss"]);
  assert.equal(lossLines(Array.from({ length: 20 }, (_, i) => `loss${i}`)).length, 7);
});

test("progress is the snapshot's own, else tokens over the budget", () => {
  assert.equal(progressOf({ progress: 0.3, tokens: 1, budget_tokens: 2 }), 0.3);
  assert.equal(progressOf({ tokens: 1, budget_tokens: 4 }), 0.25);
  assert.equal(progressOf({ tokens: 1 }), null);
});
