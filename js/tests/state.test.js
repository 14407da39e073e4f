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

test("thinning keeps the min and max of each group of four in the older half, in order", () => {
  // n = 10 > cap 9: older half = points 0..4: one full group (0..3) and a partial group (4)
  const ys = [5, 1, 9, 3, 2, 7, 7, 7, 7, 7];
  const [xs, kept] = thin(range(10), ys, 9);
  assert.deepEqual(xs, [1, 2, 4, 5, 6, 7, 8, 9]); // argmin 1, argmax 2; point 4 kept whole
  assert.deepEqual(kept, [1, 9, 2, 7, 7, 7, 7, 7]);
  // the max before the min stays before it
  assert.deepEqual(thin(range(10), [1, 9, 0, 5, 0, 0, 0, 0, 0, 0], 9)[0], [1, 2, 4, 5, 6, 7, 8, 9]);
});

test("thinning keeps a group's first and last point when its min is its max or it has < 2 numbers", () => {
  assert.deepEqual(thin(range(10), [2, 2, 2, 2, 0, 0, 0, 0, 0, 0], 9)[0], [0, 3, 4, 5, 6, 7, 8, 9]);
  assert.deepEqual(thin(range(10), [null, 4, Number.NaN, null, 0, 0, 0, 0, 0, 0], 9)[0], [0, 3, 4, 5, 6, 7, 8, 9]);
  // null and NaN are ignored when picking: the min and max of the finite ones win
  assert.deepEqual(thin(range(10), [null, 4, 8, null, 0, 0, 0, 0, 0, 0], 9)[0], [1, 2, 4, 5, 6, 7, 8, 9]);
});

test("thinning repeats while over the cap (hand-computed passes)", () => {
  // 20 -> 16 -> 12 -> 10 points; with y = x each group keeps its first and last point
  const [xs, ys] = thin(range(20), range(20), 10);
  assert.deepEqual(xs, [0, 11, 12, 13, 14, 15, 16, 17, 18, 19]);
  assert.deepEqual(ys, xs);
  const [once] = thin(range(20), range(20), 16);
  assert.deepEqual(once, [0, 3, 4, 7, 8, 9, ...range(10, 10)]);
  // under the cap: untouched; a cap too small to reach stops instead of looping
  assert.deepEqual(thin(range(5), range(5), 5)[0], range(5));
  assert.deepEqual(thin(range(7), range(7), 2)[0], range(7)); // older half 0..2 has no full group
});

test("a spike and a dip survive any amount of thinning", () => {
  const store = createStore();
  store.setHistory({ seq: 0, series: {} });
  let seq = 0;
  for (let from = 0; from < 200000; from += 5000) {
    const xs = range(5000, from);
    const ys = xs.map((x) => (x === 777 ? 1000 : x === 123457 ? -1000 : 1 + 0.001 * Math.sin(x)));
    store.applyPoints({ seq: ++seq, series: { loss: [xs, ys] } });
  }
  const { xs, ys } = store.series.get("loss");
  assert.ok(xs.length <= MAX_POINTS);
  assert.equal(Math.max(...ys), 1000);
  assert.equal(Math.min(...ys), -1000);
  assert.ok(xs.includes(777) && xs.includes(123457));
});

test("a million applied points stay within MAX_POINTS, newest kept at full resolution", () => {
  const store = createStore();
  store.setHistory({ seq: 0, series: {} });
  for (let seq = 1; seq <= 1000; seq++) {
    const xs = range(1000, (seq - 1) * 1000);
    store.applyPoints({ seq, series: { a: [xs, xs.map((x) => Math.cos(x))] } });
  }
  const { xs } = store.series.get("a");
  assert.ok(xs.length <= MAX_POINTS, `${xs.length} points`);
  assert.equal(xs[0], 0);
  assert.equal(xs[xs.length - 1], 999999);
  assert.deepEqual(xs.slice(-500), range(500, 999500));
  for (let i = 1; i < xs.length; i++) assert.ok(xs[i] > xs[i - 1]);
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
