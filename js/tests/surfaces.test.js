// One truth per fact on every surface. The golden file (tests/unit/test_surfaces.py writes it)
// holds eight real snapshots (finished, running, tm attach, a notebook run between cells, a CPU
// run on fake GPUs, an image model, a run that ended after one step against a budget, one that
// failed before its first step on a GPU never read) with what the CLI said of each: `tm
// passport`'s rows and the summary line. Here each snapshot goes through what the panels draw
// with (js/derive.js and the panels' exported functions), and through the whole dashboard drawn
// into a stand-in DOM (fakedom.js), and every figure the page or the widget shows must be what
// the CLI shows: the same number, or the same reason in the core's words.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import test from "node:test";
import {
  CONVENTIONS,
  costOverlay,
  demonstration,
  etaWhy,
  figure,
  hardwareWhy,
  mfuChartWhy,
  mfuFigure,
  ofuFigure,
  reasonOf,
  shownConvention,
  stateText,
} from "../derive.js";
import { mount } from "../dashboard.js";
import { isNum, percent, si } from "../format.js";
import { countedText } from "../panels/efficiency.js";
import { headerModelLine } from "../panels/header.js";
import { passportFacts } from "../panels/passport.js";
import { splitShares, splitWhyText } from "../panels/time.js";
import { createStore } from "../state.js";
import { byTestid, install, visibleText } from "./fakedom.js";

const golden = JSON.parse(readFileSync(new URL("./golden/surfaces.json", import.meta.url), "utf8"));
const cases = Object.fromEntries(golden.cases.map((c) => [c.name, c]));

/**
 * A row of every convention, as {convention: what it says}: "4.58 GFLOP" for a figure, the reason
 * ("n/a: titan needs ...") for a missing one, from "4.58 GFLOP [hf] · n/a [titan, megatron] (titan
 * needs ...) · ..." (tests/unit/test_surfaces.py by_convention reads the Markdown the same way).
 */
function byConvention(row) {
  const out = {};
  for (const part of row.split(" · ")) {
    const m = /^(.*?) \[([a-z, ]+)\](?: \((.*)\))?$/.exec(part);
    if (!m) continue;
    for (const c of m[2].split(", ")) out[c] = m[3] === undefined ? m[1] : `${m[1]}: ${m[3]}`;
  }
  return out;
}

/** A passport fact as one line: its text, then its small text ("· 4.58 GFLOP [hf]"). */
const line = (fact) => [fact.text, (fact.sub || "").replace(/^· /, "")].filter(Boolean).join(" · ");

const FORMAT = { flops_per_token: (v) => si(v, "FLOP/token"), flops_spent: (v) => si(v, "FLOP"), mfu_avg: percent };
const ROW = { flops_per_token: "FLOPs per token", flops_spent: "FLOPs spent", mfu_avg: "MFU" };

const NAMES = ["finished", "running", "attached", "notebook", "fake_gpus", "images", "one_step", "crashed"];

// The dashboard as a person sees it: mounted into a stand-in DOM (installed after uPlot was
// imported, so that it does not take node for a browser), drawn from the snapshot alone (no
// timeline: a chart slot says why it has nothing to draw).
const body = install();
function page(snap) {
  const store = createStore();
  store.setSnapshot(snap);
  const target = document.createElement("div");
  body.append(target);
  const unmount = mount(target, store, { version: "0" });
  return { root: target, unmount };
}
/** The text of the element with data-testid `id`. */
const textOf = (root, id) => byTestid(root, id)?.textContent ?? "";

test("the golden file holds the eight runs", () => {
  assert.deepEqual(Object.keys(cases), NAMES);
  for (const c of golden.cases) assert.ok(c.snapshot.reasons && c.passport.state && c.summary.startsWith("trainmeter: "), c.name);
});

test("every figure of every convention says on the page what tm passport says", () => {
  for (const { name, snapshot: snap, passport: rows } of golden.cases) {
    for (const key of Object.keys(ROW)) {
      const cli = byConvention(rows[ROW[key]]);
      for (const conv of CONVENTIONS) {
        if (!(conv in cli)) continue; // the CLI lists the conventions the snapshot has
        const f = figure(snap, key, conv); // what the efficiency panel's figure shows for it
        const page = f.value === null ? f.why : FORMAT[key](f.value);
        assert.equal(page, cli[conv], `${name}: ${key} [${conv}]`);
      }
    }
  }
});

test("the page's passport says what tm passport says, figure by figure", () => {
  for (const { name, snapshot: snap, passport: rows } of golden.cases) {
    const facts = passportFacts(snap, { convention: "", price: null });
    // FLOPs spent and MFU: the shown convention first, the others known beside it
    for (const [fact, row] of [["flops", "FLOPs spent"], ["mfu", "MFU"]]) {
      const page = byConvention(line(facts[fact]));
      const cli = byConvention(rows[row]);
      assert.ok(Object.keys(page).length, `${name}: ${fact}`);
      for (const [conv, said] of Object.entries(page)) assert.equal(said, cli[conv], `${name}: ${fact} [${conv}]`);
      for (const [conv, said] of Object.entries(cli)) {
        if (!said.includes(": ")) assert.equal(page[conv], said, `${name}: ${fact} [${conv}] known in the CLI, on the page too`);
      }
    }
    assert.equal(facts.device.text, rows.hardware, `${name}: hardware`);
    assert.equal(facts.dtype.text, rows.dtype, `${name}: dtype`);
    // a missing figure: the same reason, word for word; a known one: known on both
    const single = [["model", "model", "model"], ["gpuHours", "GPU-hours", "gpu_hours"], ["energy", "energy", "energy_j"]];
    for (const [fact, row, key] of single) {
      const why = reasonOf(snap, key);
      if (why) {
        assert.equal(facts[fact].text, why, `${name}: ${fact}`);
        assert.equal(rows[row], why, `${name}: ${row}`);
      } else assert.ok(!facts[fact].muted && !rows[row].startsWith("not measured"), `${name}: ${fact} known`);
    }
    const rate = figure(snap, "tokens_per_s_avg");
    if (rate.value === null) {
      assert.equal(facts.rate.text, rate.why, `${name}: throughput`);
      assert.ok(rows.throughput.includes(rate.why), `${name}: throughput in the CLI`);
    } else assert.ok(rows.throughput.startsWith(si(rate.value, "tokens/s").replace(/(\d) ([kMGT])tokens/, "$1 $2 tokens")), `${name}: ${rows.throughput}`);
    // where the time goes: each bucket's share, or the same reason
    const shares = splitShares(snap);
    if (shares.length) for (const s of shares) assert.ok(rows["where the time goes"].includes(`${s} (`), `${name}: ${s}`);
    else {
      assert.equal(facts.time.text, rows["where the time goes"], `${name}: time`);
      assert.equal(splitWhyText(snap), rows["where the time goes"], `${name}: the time panel`);
    }
  }
});

test("the state, the end and the FLOPs per token of the summary line are the page's", () => {
  for (const { name, snapshot: snap, passport: rows, summary } of golden.cases) {
    const badge = stateText(snap.run); // the header's badge
    assert.ok(rows.state.startsWith(badge), `${name}: ${rows.state} / ${badge}`);
    assert.ok(summary.startsWith(`trainmeter: ${badge}`), `${name}: ${summary}`);
    const ended = reasonOf(snap, "ended");
    if (ended) assert.equal(rows.ended, ended, `${name}: ended`);
    const conv = shownConvention(snap, "");
    const f = figure(snap, "flops_per_token", conv);
    if (snap.tokens && f.value === null) {
      const [head, ...why] = f.why.split(": ");
      assert.ok(summary.includes(`${head} [${conv}] (${why.join(": ")})`), `${name}: ${summary}`);
    } else if (snap.tokens) assert.ok(summary.includes(`${si(f.value, "FLOP/token")} [${conv}]`), `${name}: ${summary}`);
  }
  // a notebook run whose kernel is alive: the cell finished, the run is open, on every surface
  const nb = cases.notebook;
  assert.equal(stateText(nb.snapshot.run), "finished (cell 2; the run is open)");
  assert.match(nb.passport.ended, /^not yet: the run is open between notebook cells/);
});

test("a demonstration looks like one: a banner on every panel of its figures, the run's own device in the header", () => {
  const fake = cases.fake_gpus;
  const snap = fake.snapshot;
  const demo = demonstration(snap);
  assert.equal(demo.text, "demonstration: 2 × fake H100");
  assert.match(demo.banner, /^demonstration, not a measurement: /);
  // the header: the run's own dtype and device (the agent's fp32 on cpu), never the fake GPUs'
  const header = headerModelLine(snap);
  assert.match(header, / · fp32 · cpu$/);
  assert.ok(!/H100|bf16/.test(header), header);
  assert.ok(fake.passport.hardware.includes(`${demo.text}, not a measurement`));
  assert.ok(fake.summary.includes(demo.text));
  for (const name of NAMES.filter((n) => n !== "fake_gpus")) assert.equal(demonstration(cases[name].snapshot), null, name);
});

test("a finished run never says 'yet' on the page", () => {
  for (const { name, snapshot: snap } of golden.cases) {
    if (!isNum(snap.run.ended)) continue;
    const said = [];
    for (const conv of CONVENTIONS) {
      for (const key of ["flops_per_token", "flops_spent", "mfu", "mfu_avg", "model_flops_per_s_per_gpu"]) said.push(figure(snap, key, conv).why);
      said.push(mfuFigure(snap, conv).why, mfuChartWhy(snap, conv));
    }
    for (const key of ["step_time_s", "tokens_per_s", "tokens_per_s_avg", "gpu_hours", "energy_j"]) said.push(figure(snap, key).why);
    const cost = costOverlay(null, snap);
    said.push(etaWhy(snap), countedText(snap), ofuFigure(snap).why, cost.kwh.why, cost.spent.why, cost.toFinish.why);
    if (!snap.hardware) said.push(hardwareWhy(snap)); // the hardware panel's line when it is empty
    if (!snap.time_split) said.push(splitWhyText(snap)); // the time panel's line when it is empty
    for (const f of Object.values(passportFacts(snap, { convention: "", price: null }))) said.push(f.text, f.sub || "");
    const yet = said.filter((s) => /\byet\b/.test(s));
    assert.deepEqual(yet, [], name);
  }
});

test("start-up is its own bucket, on the page as in tm passport", () => {
  const { snapshot: snap, passport: rows } = cases.finished;
  const shares = splitShares(snap);
  assert.ok(shares.some((s) => s.startsWith("start-up ")), shares.join(" · "));
  assert.ok(rows["where the time goes"].includes("start-up "));
});

test("a finished run never says 'yet' anywhere on the whole page: every string of every panel, caption and tooltip", () => {
  let finished = 0;
  for (const { name, snapshot: snap } of golden.cases) {
    if (!isNum(snap.run.ended)) continue;
    finished += 1;
    const { root, unmount } = page(snap);
    const said = visibleText(root);
    assert.ok(said.length > 100, `${name}: the page was drawn`);
    const yet = said.filter((s) => /\byet\b/.test(s.text)).map((s) => `${s.where}: ${s.text}`);
    assert.deepEqual(yet, [], name);
    unmount();
  }
  assert.equal(finished, 6);
});

test("the cockpit's tokens/s, samples/s and step time are the figure or the core's reason", () => {
  for (const { name, snapshot: snap } of golden.cases) {
    const { root, unmount } = page(snap);
    for (const [id, key] of [["tm-tokens-per-s", "tokens_per_s"], ["tm-step-time", "step_time_s"], ["tm-samples-per-s", "samples_per_s"]]) {
      const why = reasonOf(snap, key);
      if (!why || (key === "tokens_per_s" && snap.tokens_missing)) continue; // no tokens: not shown
      assert.equal(textOf(root, id), why, `${name}: ${key}`);
    }
    unmount();
  }
  const one = cases.one_step.snapshot;
  assert.match(reasonOf(one, "tokens_per_s"), /^not measured: the run had no two steps in one segment/);
  assert.match(reasonOf(one, "eta_s"), /^no ETA: the run has finished, at 0\.1% of its budget$/);
  const { root, unmount } = page(one);
  assert.equal(textOf(root, "tm-eta"), reasonOf(one, "eta_s"));
  unmount();
});

test("the charts, the series table, the plan and the hardware panel say the core's reasons", () => {
  for (const { name, snapshot: snap } of golden.cases) {
    const { root, unmount } = page(snap);
    const cockpit = byTestid(root, "tm-panel-cockpit");
    if (reasonOf(snap, "loss")) assert.equal(cockpit.querySelector(".tm-empty").textContent, reasonOf(snap, "loss"), `${name}: loss chart`);
    if (reasonOf(snap, "series")) assert.equal(byTestid(root, "tm-series-table").querySelector(".tm-caption").textContent, reasonOf(snap, "series"), `${name}: series`);
    if (reasonOf(snap, "plan")) {
      assert.equal(textOf(root, "tm-plan-note"), reasonOf(snap, "plan"), `${name}: plan`);
      const planned = byTestid(root, "tm-plan-table").querySelector("td");
      assert.equal(planned.textContent, reasonOf(snap, "plan").split(": ")[0], `${name}: planned`);
      assert.equal(planned.title, reasonOf(snap, "plan"), `${name}: planned, its title`);
    }
    if (reasonOf(snap, "gpu_activity")) {
      for (const card of root.querySelectorAll(".tm-gpu")) assert.equal(card.querySelector(".tm-empty").textContent, reasonOf(snap, "gpu_activity"), `${name}: GPU chart`);
    }
    // the footer repeats no reason, in its words or others
    const footer = byTestid(root, "tm-notes").children.map((li) => li.textContent);
    for (const note of footer) assert.ok(!Object.values(snap.reasons).includes(note) && !note.startsWith("FLOPs/token:"), `${name}: ${note}`);
    unmount();
  }
  // a GPU the sampler listed and never read, on a run that has ended: the past tense
  const crashed = cases.crashed.snapshot;
  const { root, unmount } = page(crashed);
  assert.equal(textOf(root, "tm-host"), "host CPU and memory: not sampled");
  const card = root.querySelector(".tm-gpu");
  assert.ok(card.textContent.includes("the run's dtype was never seen (no peak to compare with)"), card.textContent);
  assert.ok(card.querySelector(".tm-ladder-value").textContent === "not sampled");
  assert.match(reasonOf(crashed, "gpu_activity"), /^not measured: the sampler read none of GPU 0's /);
  unmount();
});

test("the summary line says why throughput is missing as the passport does, in the core's words", () => {
  for (const { name, snapshot: snap, passport: rows, summary } of golden.cases) {
    const rate = figure(snap, "tokens_per_s_avg");
    if (rate.value !== null || snap.tokens_missing || snap.process) continue;
    const [head, ...why] = rate.why.split(": ");
    assert.ok(summary.includes(`: ${head} (${why.join(": ")})`), `${name}: ${summary}`);
    assert.ok(!/(^| )n\/a( |$)/.test(summary), `${name}: ${summary}`);
    assert.ok(rows.throughput.startsWith(rate.why), `${name}: ${rows.throughput}`);
  }
});
