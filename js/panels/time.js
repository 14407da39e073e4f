// Where the time goes: the share of run time spent in compute, data wait, checkpoint, eval,
// start-up (before the first step: imports, data, model build) and other (time_split; the core's
// reason until it is measured), the mean step time either way, and per rank
// (where there are several) each rank's step time, arrival lag, the job's wait on it and its own
// split with the wait for other ranks, stragglers marked with their cost and cause (all computed
// by the engine, trainmeter/core/ranks.py).

import { figure, isObj, notMeasured, RANK_SPLIT, rankRows, reasonOf, SPLIT, stragglerSet, timeShares } from "../derive.js";
import { el, setText } from "../dom.js";
import { count, duration, isNum, percent } from "../format.js";
import { createFigure, showFigure } from "./figure.js";
import { createPanel } from "./panel.js";

/** @typedef {import("../contract.js").Panel} Panel */
/** @typedef {import("../contract.js").Snapshot} Snapshot */

const SPLIT_COLOR = { compute: 1, data: 2, checkpoint: 4, eval: 3, wait: 6, startup: 5, other: "muted" };
const RANK_HEAD = ["rank", "step time", "arrival lag", "job waits", "steps", "step split", ""];

/** @returns {Panel} */
export function createTimePanel() {
  const panel = createPanel("time", "where the time goes");
  const stepTime = createFigure("mean step time", "tm-time-step");

  const splitBar = el("div", { class: "tm-split-bar" });
  const splitLegend = el("div", { class: "tm-split-legend" });
  const splitWhy = el("div", { class: "tm-line tm-unknown" });
  const split = el(
    "div",
    { class: "tm-split", testid: "tm-time-split" },
    el("div", { class: "tm-label", text: `share of time: ${SPLIT.map((p) => p.label).join(" · ")}` }),
    splitWhy,
    splitBar,
    splitLegend,
  );
  const segments = SPLIT.map(({ key, label, title }) => {
    const seg = el("div", { class: `tm-split-seg tm-bg-${SPLIT_COLOR[key]}`, title: title ? `${label}: ${title}` : label });
    splitBar.append(seg);
    const value = el("span", { class: "tm-split-value" });
    splitLegend.append(
      el(
        "span",
        { class: "tm-split-item", title: title || null },
        el("span", { class: `tm-swatch tm-swatch-${SPLIT_COLOR[key]}` }),
        document.createTextNode(` ${label} `),
        value,
      ),
    );
    return { key, seg, value };
  });

  const rankBody = el("tbody");
  const rankTable = el(
    "table",
    { class: "tm-table tm-rank-table", testid: "tm-rank-table" },
    el(
      "thead",
      {},
      el("tr", {}, ...RANK_HEAD.map((h) => el("th", { text: h }))),
    ),
    rankBody,
  );
  const rankNote = el("div", { class: "tm-caption", testid: "tm-stragglers" });
  const rankLegend = el(
    "div",
    { class: "tm-split-legend" },
    ...RANK_SPLIT.map(({ key, label }) =>
      el("span", { class: "tm-split-item" }, el("span", { class: `tm-swatch tm-swatch-${SPLIT_COLOR[key]}` }), document.createTextNode(` ${label}`)),
    ),
  );
  const ranks = el(
    "div",
    { class: "tm-ranks" },
    el("div", { class: "tm-label", text: "per rank" }),
    el("div", { class: "tm-table-scroll" }, rankTable),
    rankLegend,
    rankNote,
  );

  panel.body.append(stepTime.el, split, ranks);
  let rankKey = "";
  let rankCells = [];

  return {
    el: panel.el,
    update({ snap }) {
      showFigure(stepTime, figure(snap, "step_time_s"), duration, { subText: "mean interval of the last 20 timed steps" });

      const shares = timeShares(snap.time_split, snap.time_share);
      splitWhy.hidden = shares !== null;
      splitBar.hidden = splitLegend.hidden = shares === null;
      if (!shares) {
        setText(splitWhy, splitWhyText(snap));
      } else {
        for (const s of segments) {
          const part = shares.find((p) => p.key === s.key);
          s.seg.style.width = `${100 * (part.share ?? 0)}%`;
          s.seg.hidden = !part.share;
          setText(s.value, part.seconds === null ? notMeasured(snap) : `${percent(part.share)} (${duration(part.seconds)})`);
        }
      }
      const compute = shares?.find((p) => p.key === "compute");
      panel.summarize(
        [isNum(snap.step_time_s) ? `step ${duration(snap.step_time_s)}` : "", compute?.share ? `compute ${percent(compute.share)}` : ""]
          .filter(Boolean)
          .join(" · "),
      );

      // Per rank, where there are several.
      const rows = rankRows(snap);
      ranks.hidden = rows.length < 2;
      if (rows.length >= 2) {
        const key = rows.map((r) => r.rank).join(",");
        if (key !== rankKey) {
          rankKey = key;
          rankCells = rows.map(() => RANK_HEAD.map(() => el("td")));
          rankBody.replaceChildren(...rankCells.map((cells) => el("tr", {}, ...cells)));
        }
        rows.forEach((r, i) => {
          const [c0, c1, c2, c3, c4, c5, c6] = rankCells[i];
          setText(c0, r.rank);
          setText(c1, r.stepTime === null ? notMeasured(snap) : duration(r.stepTime));
          c1.title = r.overFastest === null ? "" : r.overFastest === 0 ? "the fastest rank" : `+${percent(r.overFastest)} over the fastest rank`;
          setText(c2, r.lag === null ? "–" : signedDuration(r.lag));
          setText(c3, r.jobWait === null ? "–" : `${duration(r.jobWait)}/step`);
          setText(c4, count(r.steps));
          c5.replaceChildren(rankBar(r.shares));
          setText(c6, r.straggler ? "straggler" : "");
          c0.parentNode.classList.toggle("tm-straggler", r.straggler === true);
        });
        rankNote.replaceChildren(...stragglerLines(snap, rows));
        rankLegend.hidden = !rows.some((r) => r.shares);
      }
    },
  };
}

/**
 * Why there is no split: the core's reason for `time_split` (a split whose buckets are all 0 is
 * not yet measured either).
 * @param {Snapshot} snap
 */
export function splitWhyText(snap) {
  return reasonOf(snap, "time_split") || notMeasured(snap);
}

/**
 * The split as the time panel's legend says it and `tm passport` writes it: "compute 31.4%",
 * "start-up 54.2%", ... for each bucket with a share; [] while there is none.
 * @param {Snapshot} snap
 */
export function splitShares(snap) {
  const shares = timeShares(snap.time_split, snap.time_share);
  return shares ? shares.filter((p) => p.share !== null).map((p) => `${p.label} ${percent(p.share)}`) : [];
}


/** A rank's split as a thin stacked bar (its title lists the buckets), or a dash. */
function rankBar(shares) {
  if (!shares) return document.createTextNode("–");
  const bar = el("div", { class: "tm-split-bar tm-rank-bar" });
  bar.title = shares.map((p) => `${p.label} ${p.share === null ? "–" : percent(p.share)}`).join(" · ");
  for (const p of shares) {
    if (!p.share) continue;
    const seg = el("div", { class: `tm-split-seg tm-bg-${SPLIT_COLOR[p.key]}` });
    seg.style.width = `${100 * p.share}%`;
    bar.append(seg);
  }
  return bar;
}

/** "+29.0 ms" / "−1.0 ms": a lag behind (or ahead of) the median rank. */
function signedDuration(s) {
  return `${s < 0 ? "−" : "+"}${duration(Math.abs(s))}`;
}

/**
 * The stragglers caption: none, not measured, or per straggler its cause and the job's wait.
 * @param {Snapshot} snap
 */
function stragglerLines(snap, rows) {
  const flagged = stragglerSet(snap.stragglers);
  if (!isObj(snap.rank_step_time_s) && !isObj(snap.rank_lag_s)) return [`per-rank step time: ${notMeasured(snap)}`];
  if (flagged === null) return [`stragglers: ${notMeasured(snap)}`];
  if (!flagged.size) return ["stragglers: none"];
  return rows
    .filter((r) => r.straggler)
    .map((r) => {
      const cost = r.jobWait === null ? "" : ` · the job waits ${duration(r.jobWait)} per step on it${r.jobWaitShare === null ? "" : ` (${percent(r.jobWaitShare)} of step time)`}`;
      const why = r.cause || `rank ${r.rank}: consistently slower`;
      return el("div", { class: "tm-straggler-line", text: `straggler: ${why}${cost}` });
    });
}
