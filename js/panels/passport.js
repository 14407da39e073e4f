// Run passport: the model-card summary of the run so far (model, tokens, steps, FLOPs spent under
// the convention shown in this view with the others beside, GPU-hours, energy, device, dtype, MFU
// with its convention, throughput, start and elapsed time, trainmeter version), then every series
// the training code reported with its last value. Names and values from training code go in
// through textContent only.

import {
  byConv,
  costOverlay,
  deviceLine,
  isObj,
  NOT_MEASURED,
  paramCounts,
  rankRows,
  shownConvention,
  sortConventions,
  str,
} from "../derive.js";
import { el, setText } from "../dom.js";
import { amount, count, dateTime, dollars, duration, isNum, kwh, NA, num, percent, si, tokens as tokenCount } from "../format.js";
import { hfuFact, noTokensFact, samplesFact, throughputFact } from "../samples.js";
import { createFacts, createPanel } from "./panel.js";

/** @typedef {import("../contract.js").Panel} Panel */
/** @typedef {import("../contract.js").View} View */

const MAX_ROWS = 500;

/**
 * @param {View} view
 * @param {{bundleVersion?: string}} [options]
 * @returns {Panel}
 */
export function createPassport(view, { bundleVersion = "" } = {}) {
  const panel = createPanel("passport", "run passport");
  const factList = createFacts([
    ["model", "model"],
    ["tokens", "tokens"],
    ["samples", "samples", "tm-passport-samples"],
    ["steps", "steps"],
    ["flops", "FLOPs spent", "tm-passport-flops"],
    ["gpuHours", "GPU-hours"],
    ["energy", "energy", "tm-kwh"],
    ["device", "hardware"],
    ["dtype", "dtype"],
    ["mfu", "MFU", "tm-passport-mfu"],
    ["hfu", "HFU", "tm-passport-hfu"],
    ["rate", "throughput"],
    ["ranks", "ranks", "tm-passport-ranks"],
    ["started", "started"],
    ["version", "trainmeter"],
    ["cost", "cost"],
  ]);
  const facts = factList.row;
  const table = createSeriesTable();
  panel.body.append(
    factList.el,
    el("div", { class: "tm-label", text: "reported series" }),
    table.el,
  );

  return {
    el: panel.el,
    update({ snap }) {
      const conv = shownConvention(snap, view.convention);
      const m = isObj(snap.model) ? snap.model : null;

      const { all, withoutEmbeddings } = paramCounts(snap);
      if (m) {
        const parts = [str(m.name)];
        if (all !== null) parts.push(`${si(all)} parameters${withoutEmbeddings !== null ? ` (${si(withoutEmbeddings)} without embeddings)` : ""}`);
        if (isNum(m.layers) && isNum(m.width)) parts.push(`${m.layers} layers × ${m.width}`);
        if (isNum(m.vocab)) parts.push(`vocab ${count(m.vocab)}`);
        const ctx = isNum(m.context) ? m.context : m.seq_len;
        if (isNum(ctx)) parts.push(`context ${count(ctx)}`);
        facts.model.set(parts.filter(Boolean).join(" · ") || NA);
      } else facts.model.set(NOT_MEASURED, { subText: "(found at the first training step)", muted: true });

      const noTokens = noTokensFact(snap); // a run fed no token ids: n/a and the engine's reason
      if (noTokens) facts.tokens.set(noTokens.text, { subText: noTokens.sub, muted: true });
      else facts.tokens.set(tokenCount(snap.tokens), { muted: !isNum(snap.tokens) });
      const smp = samplesFact(snap);
      facts.samples.set(smp.text, { subText: smp.sub, muted: smp.muted });
      facts.steps.set(count(snap.step), { muted: !isNum(snap.step) });

      const spent = byConv(snap, "flops_spent", conv);
      const others = isObj(snap.flops_spent)
        ? sortConventions(Object.keys(snap.flops_spent))
            .filter((c) => c !== conv && isNum(snap.flops_spent[c]))
            .map((c) => `${si(snap.flops_spent[c], "FLOP")} [${c}]`)
        : [];
      if (spent !== null) facts.flops.set(`${si(spent, "FLOP")} [${conv}]`, { subText: others.length ? `· ${others.join(" · ")}` : "" });
      else facts.flops.set(NOT_MEASURED, { muted: true });

      if (isNum(snap.gpu_hours)) facts.gpuHours.set(`${amount(snap.gpu_hours)} GPU-h`);
      else if (snap.gpus === 0) facts.gpuHours.set("none", { subText: "(CPU, no declared peak: no GPUs counted)", muted: true });
      else facts.gpuHours.set(NOT_MEASURED, { muted: true });

      const cost = costOverlay(view.price, snap);
      if (cost.kwh.value !== null) facts.energy.set(kwh(snap.energy_j), { subText: "(NVML energy counter)" });
      else facts.energy.set(cost.kwh.why, { muted: true });

      facts.device.set(deviceLine(snap) || NOT_MEASURED, { muted: !deviceLine(snap) });
      const dtype = str(snap.dtype) || (m ? str(m.run_dtype) || str(m.dtype) : "");
      facts.dtype.set(dtype || NOT_MEASURED, { muted: !dtype });

      const mfuAvg = isObj(snap.peak) ? byConv(snap, "mfu_avg", conv) ?? byConv(snap, "mfu", conv) : null;
      if (mfuAvg !== null) facts.mfu.set(`${percent(mfuAvg)} [${conv}]`, { subText: "(run average)" });
      else facts.mfu.set("no MFU", { subText: isObj(snap.peak) ? "(measuring throughput)" : "(no dense peak known)", muted: true });

      const rate = isNum(snap.tokens_per_s_avg) ? snap.tokens_per_s_avg : null;
      const tokRate = rate !== null
        ? { text: `${si(rate, "", 3)} tok/s`, sub: "(mean over the timed steps, not tokens over elapsed time)", muted: false }
        : { text: noTokens ? `n/a: ${snap.tokens_missing}` : NOT_MEASURED, sub: "", muted: true };
      const thr = throughputFact(snap, tokRate); // samples/s beside, or after the tokens' reason
      facts.rate.set(thr.text, { subText: thr.sub || "", muted: Boolean(thr.muted) });
      const hfu = hfuFact(snap);
      facts.hfu.set(hfu.text, { subText: hfu.sub, muted: hfu.muted });

      const rows = rankRows(snap);
      facts.ranks.show(rows.length >= 2);
      if (rows.length >= 2) facts.ranks.set(`${count(rows.length)} ranks`, { subText: stragglerText(rows, snap.stragglers) });

      const run = isObj(snap.run) ? snap.run : {};
      facts.started.set(isNum(run.started) ? dateTime(run.started) : NA, {
        subText: isNum(snap.elapsed_s) ? `· ${duration(snap.elapsed_s)} elapsed` : "",
        muted: !isNum(run.started),
      });
      if (str(run.version)) facts.version.set(run.version);
      else facts.version.set("not in the snapshot", { subText: bundleVersion ? `(dashboard ${bundleVersion})` : "", muted: true });

      if (cost.spent.value !== null) facts.cost.set(dollars(cost.spent.value), { subText: `at ${dollars(view.price)} per GPU-hour (this view only)` });
      else facts.cost.set(cost.spent.why, { muted: true });

      table.update(snap.series);
      panel.summarize(isNum(snap.tokens) ? `${tokenCount(snap.tokens)} tokens` : "");
    },
  };
}

/** "· straggler: rank 2, the job waits 31.3 ms per step on it (35.3%)", "· no straggler", or "". */
function stragglerText(rows, stragglers) {
  if (!Array.isArray(stragglers)) return "";
  const flagged = rows.filter((r) => r.straggler);
  if (!flagged.length) return "· no straggler";
  const one = (r) =>
    `rank ${r.rank}` + (r.jobWait === null ? "" : `, the job waits ${duration(r.jobWait)} per step on it${r.jobWaitShare === null ? "" : ` (${percent(r.jobWaitShare)})`}`);
  return `· straggler${flagged.length > 1 ? "s" : ""}: ${flagged.map(one).join("; ")}`;
}

/** Every series in snapshot.series with its last value, step and EMA; rows rebuilt only when the names change. */
function createSeriesTable() {
  const tbody = el("tbody");
  const more = el("div", { class: "tm-caption" });
  const empty = el("div", { class: "tm-caption", text: "no series reported yet" });
  const table = el(
    "table",
    { class: "tm-table tm-series-table" },
    el("thead", {}, el("tr", {}, ...["series", "last", "step", "EMA"].map((h) => el("th", { text: h })))),
    tbody,
  );
  const root = el("div", { class: "tm-table-scroll", testid: "tm-series-table" }, table, empty, more);
  let key = "";
  let cells = [];
  let names = [];
  return {
    el: root,
    update(series) {
      const all = isObj(series) ? Object.keys(series).sort() : [];
      names = all.slice(0, MAX_ROWS);
      const k = names.join("\n");
      if (k !== key) {
        key = k;
        cells = names.map((n) => [el("td", { class: "tm-series-name", text: n, title: n }), el("td"), el("td"), el("td")]);
        tbody.replaceChildren(...cells.map((c) => el("tr", {}, ...c)));
      }
      names.forEach((n, i) => {
        const s = isObj(series[n]) ? series[n] : {};
        setText(cells[i][1], num(s.value, 4));
        setText(cells[i][2], count(s.step));
        setText(cells[i][3], isNum(s.ema) ? num(s.ema, 4) : "");
      });
      table.hidden = names.length === 0;
      empty.hidden = names.length > 0;
      setText(more, all.length > names.length ? `${all.length - names.length} more series not listed` : "");
    },
  };
}
