// Plan vs actual: the declared budget (tokens, or FLOPs counted in the run's convention) against
// what is done, planned against achieved throughput (the plan's MFU is an assumption and says so),
// the ETA against the planned one, and the view-time money overlay: a price per GPU-hour typed here
// gives dollars spent and to finish. The price stays in this view's memory (view.js).

import {
  budgetOf,
  byConv,
  costOverlay,
  etaWhy,
  HOW_TO_BUDGET,
  isObj,
  NOT_MEASURED,
  parsePrice,
  planVersus,
  runConvention,
  str,
} from "../derive.js";
import { el, setAttr, setReason, setText } from "../dom.js";
import { amount, dollars, duration, isNum, NA, percent, si, tokens as tokenCount } from "../format.js";
import { createPanel } from "./panel.js";

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
  const planNote = el("div", { class: "tm-caption" });

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
  panel.body.append(
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
      const planWhy = plan ? NA : "no plan";
      const [, r1, r2, r3] = rows.rate;
      setText(r1, p("tokens_per_s") === null ? planWhy : `${si(p("tokens_per_s"), "", 3)} tokens/s`);
      setText(r2, isNum(snap.tokens_per_s) ? `${si(snap.tokens_per_s, "", 3)} tokens/s` : NOT_MEASURED);
      setText(r3, versus.tokensPerS === null ? "" : percent(versus.tokensPerS));

      const [, m1, m2, m3] = rows.mfu;
      const mfu = isObj(snap.peak) ? byConv(snap, "mfu", conv) : null;
      setText(m1, p("mfu") === null ? planWhy : `${percent(p("mfu"))} [${conv}] assumed`);
      setText(m2, mfu === null ? "no MFU" : `${percent(mfu)} [${conv}]`);
      setText(m3, versus.mfu === null ? "" : percent(versus.mfu));

      const [, e1, e2, e3] = rows.eta;
      const noBudget = b.kind === null ? "no budget" : "";
      setText(e1, p("eta_s") === null ? noBudget || (plan ? etaWhy(snap) : planWhy) : duration(p("eta_s")));
      setText(e2, isNum(snap.eta_s) ? duration(snap.eta_s) : noBudget || etaWhy(snap));
      // The ETAs compare as a difference in time, not as a ratio; within a second reads "on plan".
      const late = versus.etaLate;
      setText(e3, late === null ? "" : Math.abs(late) < 1 ? "on plan" : `${duration(Math.abs(late))} ${late > 0 ? "later" : "sooner"}`);

      setReason(
        planNote,
        plan
          ? `Plan: the throughput at an assumed MFU of ${percent(p("mfu"))} [${conv}] on the dense peak${str(plan.source) ? ` (${plan.source})` : ""}.`
          : `No plan: it needs a dense peak and FLOPs per token${isObj(snap.peak) ? "" : " (no peak is known; declare one with --peak)"}.`,
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

export function show(node, item, fmt) {
  setText(node, item.value === null ? item.why : fmt(item.value));
  node.classList.toggle("tm-unknown", item.value === null);
}
