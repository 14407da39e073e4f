import assert from "node:assert/strict";
import test from "node:test";
import { align, createStore, ema, MAX_POINTS, thin } from "../state.js";

const range = (n, from = 0) => Array.from({ length: n }, (_, i) => i + from);

test("a full history fills the store and a newer delta appends to it", () => {
  const store = createStore();
  store.setHistory({ seq: 3, series: { train_loss: [[1, 2, 3], [3.0, 2.9, 2.8]] } });
  assert.equal(store.applyPoints({ type: "points", seq: 5, series: { train_loss: [[4, 5], [2.7, 2.6]] } }), true);
  assert.deepEqual(store.series.get("train_loss").xs, [1, 2, 3, 4, 5]);
  assert.equal(store.seq, 5);
});

test("a stale or repeated delta is ignored", () => {
  const store = createStore();
  store.setHistory({ seq: 5, series: { loss: [[1, 2], [1, 1]] } });
  assert.equal(store.applyPoints({ seq: 5, series: { loss: [[3], [1]] } }), false);
  assert.equal(store.applyPoints({ seq: 4, series: { loss: [[3], [1]] } }), false);
  assert.deepEqual(store.series.get("loss").xs, [1, 2]);
});

test("a full history always replaces the store, even when its producer restarted seq", () => {
  const store = createStore();
  store.setHistory({ seq: 10, series: { a: [[1], [1]] } });
  store.applyPoints({ seq: 12, series: { a: [[2], [1]] } });
  assert.equal(store.setHistory({ seq: 3, series: { b: [[1, 2, 3], [1, 1, 1]] } }), true);
  assert.deepEqual([...store.series.keys()], ["b"]);
  assert.equal(store.applyPoints({ seq: 4, series: { b: [[4], [1]] } }), true);
  assert.deepEqual(store.series.get("b").xs, [1, 2, 3, 4]);
});

test("points that do not move x forward are dropped and NaN becomes a gap", () => {
  const store = createStore();
  store.setHistory({ seq: 1, series: { a: [[1, 2], [1, 2]] } });
  store.applyPoints({ seq: 2, series: { a: [[2, 1, 3, 4], [9, 9, Number.NaN, 4]] } });
  assert.deepEqual(store.series.get("a").xs, [1, 2, 3, 4]);
  assert.deepEqual(store.series.get("a").ys, [1, 2, null, 4]);
});

test("malformed input is ignored, never thrown", () => {
  const store = createStore();
  assert.equal(store.setHistory(null), false);
  assert.equal(store.setHistory({}), false);
  assert.equal(store.applyPoints({ type: "points" }), false);
  store.setHistory({ seq: 1, series: { bad: "x", good: [[1], [2]] } });
  assert.deepEqual([...store.series.keys()], ["good"]);
  assert.equal(store.setSnapshot("nope"), false);
});

test("the store stays bounded however long the run, keeping the newest points", () => {
  const store = createStore();
  store.setHistory({ seq: 0, series: {} });
  for (let seq = 1; seq <= 100; seq++) {
    const xs = range(100, (seq - 1) * 100);
    store.applyPoints({ seq, series: { a: [xs, xs.map((x) => x / 2)] } });
  }
  const { xs } = store.series.get("a");
  assert.ok(xs.length <= MAX_POINTS);
  assert.equal(xs[xs.length - 1], 9999);
  assert.equal(xs[0], 0);
  assert.deepEqual(xs.slice(-100), range(100, 9900));
});

test("thinning drops every other point of the older half, like core.timeline", () => {
  const [xs] = thin(range(9), range(9), 8);
  assert.deepEqual(xs, [0, 2, 4, 5, 6, 7, 8]);
});

test("subscribers hear each change once", () => {
  const store = createStore();
  let calls = 0;
  const off = store.subscribe(() => calls++);
  store.setSnapshot({ step: 1 });
  store.setHistory({ seq: 1, series: {} });
  off();
  store.setSnapshot({ step: 2 });
  assert.equal(calls, 2);
  assert.deepEqual(store.rev, { snapshot: 2, history: 1 });
});

test("the EMA matches core.metrics.ema: seeded with the first value, re-seeded after a gap", () => {
  const out = ema([2, 4, null, 10, 0], 0.5);
  assert.deepEqual(out, [2, 3, null, 10, 5]);
});

test("align puts series with different steps on one x axis", () => {
  const data = align([
    { xs: [1, 2, 3], ys: [3, 2, 1] },
    { xs: [2, 4], ys: [9, 8] },
  ]);
  assert.deepEqual(data, [
    [1, 2, 3, 4],
    [3, 2, 1, null],
    [null, 9, null, 8],
  ]);
});
