// Header: run name, state badge, step, elapsed time, and one line about the model.

import { el, setAttr, setText } from "../dom.js";
import { deviceLine, isObj, str } from "../derive.js";
import { count, duration, isNum, si } from "../format.js";

export const STATES = ["running", "finished", "failed", "interrupted", "idle"];

export function createHeader() {
  const name = el("span", { class: "tm-run-name", testid: "tm-run-name" });
  const state = el("span", { class: "tm-badge", testid: "tm-state" });
  const step = el("span", { class: "tm-stat-value", testid: "tm-step" });
  const elapsed = el("span", { class: "tm-stat-value", testid: "tm-elapsed" });
  const segment = el("span", { class: "tm-stat", testid: "tm-segment" });
  const model = el("div", { class: "tm-model", testid: "tm-model" });
  const root = el(
    "div",
    { class: "tm-header" },
    el(
      "div",
      { class: "tm-title-row" },
      el("div", { class: "tm-title" }, name, state),
      el(
        "div",
        { class: "tm-stats" },
        el("span", { class: "tm-stat" }, el("span", { class: "tm-stat-label", text: "step " }), step),
        el("span", { class: "tm-stat" }, el("span", { class: "tm-stat-label", text: "elapsed " }), elapsed),
        segment,
      ),
    ),
    model,
  );

  return {
    el: root,
    update(snap) {
      const run = isObj(snap.run) ? snap.run : {};
      setText(name, str(run.name) || str(run.id) || "training run");
      setAttr(name, "title", str(run.id) ? `run ${run.id}` : null);
      // Only a known state becomes a class name; anything else is shown as text, unstyled.
      const s = str(run.state);
      setText(state, s || "waiting");
      state.className = `tm-badge tm-state-${STATES.includes(s) ? s : "unknown"}`;
      setText(step, count(snap.step));
      setText(elapsed, duration(snap.elapsed_s));
      setText(segment, isNum(run.segment) && run.segment > 1 ? `segment ${run.segment}` : "");
      setText(model, modelLine(snap.model, deviceLine(snap), str(snap.dtype)));
    },
  };
}

/** "GPT · 820k params · 4 layers × 128 · seq 128 · float32 · cpu" from whatever is known. */
/** `dtype`: the run's effective dtype (`--dtype`, else what the agent saw). */
export function modelLine(m, device = "", dtype = "") {
  if (!isObj(m)) return "";
  const parts = [];
  if (str(m.name)) parts.push(m.name);
  if (isNum(m.params)) parts.push(`${si(m.params)} params`);
  if (isNum(m.layers) && isNum(m.width)) parts.push(`${m.layers} layers × ${m.width}`);
  if (isNum(m.seq_len)) parts.push(`seq ${m.seq_len}`);
  const shownDtype = dtype || str(m.run_dtype) || str(m.dtype);
  if (shownDtype) parts.push(shownDtype);
  if (device) parts.push(device);
  else if (str(m.device)) parts.push(isNum(m.gpus) && m.gpus > 1 ? `${m.gpus} × ${m.device}` : m.device);
  return parts.join(" · ");
}

export { isObj, str };
