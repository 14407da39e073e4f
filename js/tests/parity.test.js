// The browser's copies of the core's rules against the golden file the Python writes
// (tests/unit/test_parity.py): thinning a chart series (core/timeline.py thin_pass) and the EMA
// of a series (core/metrics.py ema with engine.EMA_BETA); and MFU over time, which the browser
// does not compute: the chart draws the engine's mfu/<convention> series, the snapshot's MFU at
// each step, as it is. Nor any other figure: the shares, ratios, means and fractions the panels
// show are a real snapshot's own keys (the file's `shown`), read as given.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import test from "node:test";
import {
  budgetOf,
  flopsRequired,
  gpuMean,
  mfuOverTime,
  ofuFigure,
  paramCounts,
  planVersus,
  RANK_SPLIT,
  rankRows,
  SPLIT,
  timeShares,
} from "../derive.js";
import { progressOf } from "../panels/cockpit.js";
import { createStore, ema, thin } from "../state.js";

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

test("MFU over time is the engine's: each point the snapshot's MFU at its step, whatever moved", () => {
  assert.equal(golden.mfu.length, 2);
  for (const c of golden.mfu) {
    // the timeline as a widget or the page receives it, into the store the panels read
    const store = createStore({ cap: c.cap });
    assert.ok(store.setHistory({ seq: 1, series: c.series }));
    let drawn = 0;
    for (const conv of c.conventions) {
      const series = mfuOverTime(store.series, conv);
      const at = c.snapshot_mfu[conv];
      if (!at) {
        assert.equal(series, null, `${conv}: no FLOPs per token, no chart`);
        continue;
      }
      assert.deepEqual(series.xs, c.series[`mfu/${conv}`][0], conv);
      assert.deepEqual(series.ys, series.xs.map((x) => at[String(x)]), conv); // to the last bit
      drawn += 1;
    }
    assert.ok(drawn >= 3);
  }
});

test("every figure the panels show from a real snapshot is the engine's own key, as given", () => {
  const snap = golden.shown;
  const conv = snap.convention;
  // the budget bar: progress_flops (a FLOPs budget is shown first), progress for tokens alone
  assert.equal(budgetOf(snap).fraction, snap.progress_flops);
  assert.equal(budgetOf({ ...snap, budget_flops: null }).fraction, snap.progress);
  assert.equal(progressOf(snap), snap.progress);
  for (const c of Object.keys(snap.flops_required)) assert.equal(flopsRequired(snap, c), snap.flops_required[c], c);
  assert.equal(paramCounts(snap).withoutEmbeddings, snap.params_without_embeddings);
  assert.deepEqual(planVersus(snap), {
    tokensPerS: snap.plan_vs_actual.tokens_per_s,
    mfu: snap.plan_vs_actual.mfu,
    etaLate: snap.plan_vs_actual.eta_late_s,
  });
  const shares = timeShares(snap.time_split, snap.time_share);
  assert.deepEqual(shares.map((p) => [p.seconds, p.share]), SPLIT.map((p) => [snap.time_split[p.key], snap.time_share[p.key]]));
  for (const r of rankRows(snap)) {
    assert.equal(r.overFastest, snap.rank_over_fastest[r.rank], r.rank);
    assert.deepEqual(r.shares.map((p) => p.share), RANK_SPLIT.map((p) => snap.rank_time_share[r.rank][p.key]), r.rank);
  }
  assert.deepEqual(ofuFigure(snap), { value: snap.gpu_mean.ofu, why: "", observed: snap.gpu_mean.observed_flops_per_s });
  assert.equal(gpuMean(snap, "gpu_util").value, snap.gpu_mean.gpu_util);
  assert.ok(conv && snap.progress_flops !== snap.progress); // both budgets: two different fractions
});
