// Plan vs actual: the declared budget (tokens, or FLOPs counted in the run's convention) against
// what is done, planned against achieved throughput (the plan's MFU is an assumption and says so),
// the ETA against the planned one, and the view-time money overlay: a price per GPU-hour typed here
// gives dollars spent and to finish. The price stays in this view's memory (view.js). A missing
// figure's cell shows the headline of the core's reason ("no plan", "not measured", "no MFU"), the
// whole reason in its title; under the table, the plan's own reason when there is no plan.

import {
  budgetOf,
  costOverlay,
  figure,
  HOW_TO_BUDGET,
  isObj,
  mfuFigure,
  parsePrice,
  planVersus,
  runConvention,
  splitReason,
  str,
  whyMissing,
} from "../derive.js";
import { el, setAttr, setReason, setText } from "../dom.js";
import { amount, dollars, duration, isNum, NA, percent, si, tokens as tokenCount } from "../format.js";
import { createBanner, createPanel } from "./panel.js";

/** @typedef {import("../contract.js").Panel} Panel */
/** @typedef {import("../contract.js").View} View */

/**
 * @param {View} view
 * @returns {Panel}
 */
export function createPlan(view) {
  const panel = createPanel("plan", "plan vs actual");

  const budgetLine = el("div", { class: "tm-line", testid: "tm-plan-budget" });
  const budgetSub = el("div", { class: "tm-sub" });
  const fill = el("div", { class: "tm-bar-fill" });
  const bar = el("div", { class: "tm-bar", role: "progressbar", "aria-valuemin": "0", "aria-valuemax": "100" }, fill);

  const rows = {};
  const tbody = el("tbody");
  for (const [key, label] of [
    ["rate", "tokens/s"],
    ["mfu", "MFU"],
    ["eta", "ETA"],
  ]) {
    const cells = [el("th", { text: label, scope: "row" }), el("td"), el("td"), el("td")];
    tbody.append(el("tr", {}, ...cells));
    rows[key] = cells;
  }
  const table = el(
    "table",
    { class: "tm-table tm-plan-table", testid: "tm-plan-table" },
    el("thead", {}, el("tr", {}, ...["", "planned", "achieved", "achieved / plan"].map((h) => el("th", { text: h })))),
    tbody,
  );
  const planNote = el("div", { class: "tm-caption", testid: "tm-plan-note" });

  // Money, at view time only.
  const price = el("input", {
    type: "number",
    min: "0",
    step: "0.01",
    inputmode: "decimal",
    placeholder: "e.g. 2.50",
    class: "tm-input",
    testid: "tm-price",
    "aria-label": "price per GPU-hour in dollars",
  });
  if (view.price !== null) price.value = String(view.price);
  price.addEventListener("input", () => view.set("price", parsePrice(price.value)));
  const spent = el("span", { class: "tm-money", testid: "tm-dollars-spent" });
  const toFinish = el("span", { class: "tm-money", testid: "tm-dollars-to-finish" });
  const hoursSpent = el("span", { class: "tm-fact-sub" });
  const hoursLeft = el("span", { class: "tm-fact-sub" });
  const money = el(
    "div",
    { class: "tm-money-box" },
    el("label", { class: "tm-control" }, document.createTextNode("price per GPU-hour $ "), price),
    el(
      "dl",
      { class: "tm-facts" },
      el("dt", { text: "dollars spent" }),
      el("dd", {}, spent, hoursSpent),
      el("dt", { text: "dollars to finish" }),
      el("dd", {}, toFinish, hoursLeft),
    ),
    el("div", { class: "tm-caption", text: "The price stays in this view: it is never sent to the kernel or saved." }),
  );

  // Two blocks: the budget and the plan, then the cost; side by side when the panel is wide.
  const banner = createBanner(); // fake GPUs: the plan's peak and GPUs are a demonstration's
  panel.body.append(
    banner.el,
    el(
      "div",
      { class: "tm-plan-main" },
      el("div", { class: "tm-label", text: "budget" }),
      budgetLine,
      bar,
      budgetSub,
      table,
      planNote,
    ),
    el("div", { class: "tm-plan-cost" }, el("div", { class: "tm-label", text: "cost at your price" }), money),
  );

  return {
    el: panel.el,
    update({ snap }) {
      banner.update(snap);
      const conv = runConvention(snap);
      const b = budgetOf(snap);
      bar.hidden = !isNum(b.fraction);
      if (b.kind === null) {
        setReason(budgetLine, HOW_TO_BUDGET);
        setText(budgetSub, "");
      } else if (b.kind === "flops") {
        setText(
          budgetLine,
          `${si(b.done, "FLOP")} of ${si(b.total, "FLOP")} [${b.conv}] · ${b.fraction === null ? b.why || NA : percent(b.fraction)}`,
        );
        setText(budgetSub, isNum(snap.budget_tokens) ? `${tokenCount(snap.tokens)} of ${tokenCount(snap.budget_tokens, 3)} tokens at this convention's FLOPs per token` : "");
      } else {
        setText(budgetLine, `${tokenCount(b.done)} of ${tokenCount(b.total, 3)} tokens · ${b.fraction === null ? b.why || NA : percent(b.fraction)}`);
        setText(budgetSub, "");
      }
      budgetLine.classList.toggle("tm-unknown", b.kind === null);
      if (!bar.hidden) {
        const pct = Math.min(100, Math.max(0, 100 * b.fraction));
        fill.style.width = `${pct}%`;
        setAttr(bar, "aria-valuenow", pct.toFixed(1));
      }
      panel.summarize(b.kind === null ? "no budget" : `${percent(b.fraction)} of budget`);

      // Planned against achieved: the engine's ratios and difference (plan_vs_actual).
      const plan = isObj(snap.plan) ? snap.plan : null;
      const versus = planVersus(snap);
      const p = (key) => (plan && isNum(plan[key]) ? plan[key] : null);
      const planWhy = plan ? NA : whyMissing(snap, "plan"); // the core's: "no plan: a plan needs ..."
      const eta = figure(snap, "eta_s");
      const [, r1, r2, r3] = rows.rate;
      cell(r1, p("tokens_per_s") === null ? planWhy : `${si(p("tokens_per_s"), "", 3)} tokens/s`, p("tokens_per_s") === null);
      const rate = figure(snap, "tokens_per_s");
      cell(r2, rate.value === null ? rate.why : `${si(rate.value, "", 3)} tokens/s`, rate.value === null);
      setText(r3, versus.tokensPerS === null ? "" : percent(versus.tokensPerS));

      const [, m1, m2, m3] = rows.mfu;
      const mfu = mfuFigure(snap, conv);
      cell(m1, p("mfu") === null ? planWhy : `${percent(p("mfu"))} [${conv}] assumed`, p("mfu") === null);
      cell(m2, mfu.value === null ? mfu.why : `${percent(mfu.value)} [${conv}]`, mfu.value === null);
      setText(m3, versus.mfu === null ? "" : percent(versus.mfu));

      const [, e1, e2, e3] = rows.eta;
      const planEta = p("eta_s");
      cell(e1, planEta !== null ? duration(planEta) : plan ? eta.why || whyMissing(snap, "eta_s") : planWhy, planEta === null);
      cell(e2, eta.value === null ? eta.why : duration(eta.value), eta.value === null);
      // The ETAs compare as a difference in time, not as a ratio; within a second reads "on plan".
      const late = versus.etaLate;
      setText(e3, late === null ? "" : Math.abs(late) < 1 ? "on plan" : `${duration(Math.abs(late))} ${late > 0 ? "later" : "sooner"}`);

      setReason(
        planNote,
        plan
          ? `Plan: the throughput at an assumed MFU of ${percent(p("mfu"))} [${conv}] on the dense peak${str(plan.source) ? ` (${plan.source})` : ""}.`
          : planWhy,
      );

      // Money at the typed price.
      const cost = costOverlay(view.price, snap);
      show(spent, cost.spent, dollars);
      show(toFinish, cost.toFinish, dollars);
      setText(hoursSpent, isNum(snap.gpu_hours) ? ` · ${amount(snap.gpu_hours)} GPU-h` : "");
      setText(hoursLeft, isNum(snap.gpu_hours_to_finish) ? ` · ${amount(snap.gpu_hours_to_finish)} GPU-h` : "");
    },
  };
}

/**
 * A table cell: a figure, or for a missing one the headline of the core's reason ("no plan", "not
 * measured"), muted, with the whole reason as its title.
 */
function cell(node, text, missingFigure) {
  const [head] = missingFigure ? splitReason(text) : [text];
  setText(node, head);
  node.title = missingFigure && head !== text ? text : "";
  node.classList.toggle("tm-unknown", missingFigure);
}

export function show(node, item, fmt) {
  setText(node, item.value === null ? item.why : fmt(item.value));
  node.classList.toggle("tm-unknown", item.value === null);
}
