import assert from "node:assert/strict";
import test from "node:test";
import { processLine } from "../panels/header.js";

// tm attach's process facts (docs/spec.md "tm attach and the release check"); the byte and date
// forms are format.js's (1.2 GiB = 1288490189 bytes; the date is local time, built here the same way).
const started = new Date(2025, 10, 30, 9, 15).getTime() / 1000;

test("an attached process reads as one line of facts, CPU % as top's", () => {
  const p = {
    pid: 4242, user: "alice", cmdline: "python train.py", started, alive: true,
    cpu_percent: 180, rss_bytes: 1288490189, threads: 14, children: 1,
  };
  assert.equal(
    processLine(p),
    "process 4242 · alice · python train.py · started 2025-11-30 09:15 · CPU 180.0% · RSS 1.20 GiB · 14 threads · 1 child",
  );
});

test("an ended process keeps its facts and says when it ended; unknowns are left out", () => {
  const p = { pid: 7, uid: 1000, alive: false, ended: started, cpu_percent: null, threads: null };
  assert.equal(processLine(p), "process 7 · uid 1000 · ended 2025-11-30 09:15");
  assert.equal(processLine({ pid: 7, alive: false }), "process 7 · ended");
});

test("no process (a run under tm) or a bad one gives no line", () => {
  assert.equal(processLine(null), "");
  assert.equal(processLine({ pid: "7" }), "");
  assert.equal(processLine([1]), "");
});
