import assert from "node:assert/strict";
import test from "node:test";
import { lossLines, progressOf } from "../panels/cockpit.js";

const roled = (roles) => Object.fromEntries(Object.entries(roles).map(([n, role]) => [n, { value: 1, role }]));

test("the loss chart draws the training loss raw and smoothed, validation losses with points", () => {
  // roles as trainmeter/core/catalog.py gives them: aux_loss and lr have none
  const series = roled({ lr: null, val_loss: "val_loss", train_loss: "train_loss", aux_loss: null, "train/loss": "train_loss" });
  const lines = lossLines(["lr", "val_loss", "train_loss", "aux_loss", "train/loss"], series, { train_loss: 50, "train/loss": 10 });
  assert.deepEqual(
    lines.map((l) => [l.label, l.kind, l.val, Boolean(l.points), l.color]),
    [
      ["train_loss", "raw", false, false, 0],
      ["train_loss (EMA)", "ema", false, false, 1],
      ["val_loss", "raw", true, true, 2],
      ["train/loss", "raw", false, false, 3],
    ],
  );
  assert.deepEqual(lossLines(["eval/loss"], roled({ "eval/loss": "val_loss" })).map((l) => l.label), ["eval/loss"]);
  const many = Array.from({ length: 20 }, (_, i) => `loss${i}`);
  assert.equal(lossLines(many, roled(Object.fromEntries(many.map((n) => [n, "train_loss"])))).length, 7);
});

test("progress is the snapshot's own, never tokens over the budget worked out here", () => {
  assert.equal(progressOf({ progress: 0.3, tokens: 1, budget_tokens: 2 }), 0.3);
  assert.equal(progressOf({ tokens: 1, budget_tokens: 4 }), null); // the engine gave none
  assert.equal(progressOf({ tokens: 1 }), null);
});
