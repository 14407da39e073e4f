// The browser's copies of the core's rules against the golden file the Python writes
// (tests/unit/test_parity.py): thinning a chart series (core/timeline.py thin_pass) and the EMA
// of a series (core/metrics.py ema with engine.EMA_BETA).

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import test from "node:test";
import { ema, thin } from "../state.js";

const golden = JSON.parse(readFileSync(new URL("./golden/parity.json", import.meta.url), "utf8"));

test("thinning keeps exactly the points the core's thin_pass keeps", () => {
  assert.ok(golden.thin.length >= 5);
  for (const c of golden.thin) {
    const [xs, ys] = thin(c.xs, c.ys, c.cap);
    assert.deepEqual(xs, c.out_xs, `cap ${c.cap}, ${c.xs.length} points`);
    assert.deepEqual(ys, c.out_ys, `cap ${c.cap}, ${c.xs.length} points`);
  }
});

test("the EMA is the core's, to the last bit, with the engine's beta", () => {
  assert.equal(golden.beta, 0.9);
  for (const c of golden.ema) assert.deepEqual(ema(c.ys, golden.beta), c.out);
  for (const c of golden.ema) assert.deepEqual(ema(c.ys), c.out); // the default beta is the engine's
});
