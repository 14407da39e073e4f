// Where the time goes: the share of run time spent in compute, data wait, checkpoint, eval and
// other (time_split; "not measured yet" until it is), the mean step time either way, and per rank
// (where there are several) each rank's step time with stragglers marked.

import { isObj, NOT_MEASURED, rankRows, SPLIT, stragglerSet, timeShares } from "../derive.js";
import { el, setText } from "../dom.js";
import { count, duration, isNum, percent } from "../format.js";
import { createFigure } from "./figure.js";
import { createPanel } from "./panel.js";

const SPLIT_COLOR = { compute: 1, data: 2, checkpoint: 4, eval: 3, other: "muted" };

export function createTimePanel() {
  const panel = createPanel("time", "where the time goes");
  const stepTime = createFigure("mean step time", "tm-time-step");

  const splitBar = el("div", { class: "tm-split-bar" });
  const splitLegend = el("div", { class: "tm-split-legend" });
  const splitWhy = el("div", { class: "tm-line tm-unknown" });
  const split = el(
    "div",
    { class: "tm-split", testid: "tm-time-split" },
    el("div", { class: "tm-label", text: "share of time: compute · data wait · checkpoint · eval · other" }),
    splitWhy,
    splitBar,
    splitLegend,
  );
  const segments = SPLIT.map(({ key, label }) => {
    const seg = el("div", { class: `tm-split-seg tm-bg-${SPLIT_COLOR[key]}`, title: label });
    splitBar.append(seg);
    const value = el("span", { class: "tm-split-value" });
    splitLegend.append(
      el("span", { class: "tm-split-item" }, el("span", { class: `tm-swatch tm-swatch-${SPLIT_COLOR[key]}` }), document.createTextNode(` ${label} `), value),
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
      el("tr", {}, ...["rank", "step time", "vs fastest", "steps", ""].map((h) => el("th", { text: h }))),
    ),
    rankBody,
  );
  const rankNote = el("div", { class: "tm-caption", testid: "tm-stragglers" });
  const ranks = el("div", { class: "tm-ranks" }, el("div", { class: "tm-label", text: "per rank" }), rankTable, rankNote);

  panel.body.append(stepTime.el, split, ranks);
  let rankKey = "";
  let rankCells = [];

  return {
    el: panel.el,
    update({ snap }) {
      if (isNum(snap.step_time_s)) stepTime.set(duration(snap.step_time_s), { subText: "mean interval of the last 20 timed steps" });
      else stepTime.missing(NOT_MEASURED, "needs two timed steps");

      const shares = timeShares(snap.time_split);
      splitWhy.hidden = shares !== null;
      splitBar.hidden = splitLegend.hidden = shares === null;
      if (!shares) {
        setText(splitWhy, `${NOT_MEASURED}: the split of run time into compute, data wait, checkpoint and eval is not recorded by this version`);
      } else {
        for (const s of segments) {
          const part = shares.find((p) => p.key === s.key);
          s.seg.style.width = `${100 * (part.share ?? 0)}%`;
          s.seg.hidden = !part.share;
          setText(s.value, part.seconds === null ? NOT_MEASURED : `${percent(part.share)} (${duration(part.seconds)})`);
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
          rankCells = rows.map(() => [0, 1, 2, 3, 4].map(() => el("td")));
          rankBody.replaceChildren(...rankCells.map((cells) => el("tr", {}, ...cells)));
        }
        rows.forEach((r, i) => {
          const [c0, c1, c2, c3, c4] = rankCells[i];
          setText(c0, r.rank);
          setText(c1, r.stepTime === null ? NOT_MEASURED : duration(r.stepTime));
          setText(c2, r.vsFastest === null ? "" : r.vsFastest === 1 ? "fastest" : `+${percent(r.vsFastest - 1)}`);
          setText(c3, count(r.steps));
          setText(c4, r.straggler ? "straggler" : "");
          c0.parentNode.classList.toggle("tm-straggler", r.straggler === true);
        });
        const flagged = stragglerSet(snap.stragglers);
        setText(
          rankNote,
          flagged === null
            ? `stragglers: ${NOT_MEASURED}`
            : flagged.size
              ? `stragglers: rank${flagged.size > 1 ? "s" : ""} ${[...flagged].join(", ")} consistently slower`
              : "stragglers: none",
        );
      }
      if (!isObj(snap.rank_step_time_s) && rows.length >= 2) setText(rankNote, `per-rank step time: ${NOT_MEASURED}`);
    },
  };
}
