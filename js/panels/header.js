// Header: run name, state badge, step, elapsed time, and one line about the model with the run's
// own dtype and device (the agent's, never a fake GPU's); on fake GPUs, a banner line naming them
// a demonstration; for a run that `tm attach` watches from outside, a line of process facts and
// why loss, steps and FLOPs are missing.

import { el, setAttr, setText } from "../dom.js";
import { demonstration, deviceLine, isObj, noteAbout, stateText, str } from "../derive.js";
import { bytes, count, dateTime, duration, isNum, si } from "../format.js";

// "ended": the log has no run_end (the supervisor stopped without a close); core/engine.py
export const STATES = ["running", "finished", "failed", "interrupted", "idle", "ended"];


/** The header is drawn from the snapshot alone. */
export function createHeader() {
  const name = el("span", { class: "tm-run-name", testid: "tm-run-name" });
  const state = el("span", { class: "tm-badge", testid: "tm-state" });
  const step = el("span", { class: "tm-stat-value", testid: "tm-step" });
  const elapsed = el("span", { class: "tm-stat-value", testid: "tm-elapsed" });
  const segment = el("span", { class: "tm-stat", testid: "tm-segment" });
  const model = el("div", { class: "tm-model", testid: "tm-model" });
  // fake GPUs: "demonstration: 2 × fake H100", a banner beside the run's own device
  const demo = el("div", { class: "tm-banner tm-banner-line", testid: "tm-demo" });
  const process = el("div", { class: "tm-model", testid: "tm-process" });
  // the engine's note, said here at the top: it explains every empty figure below (the notes list
  // skips a note shown as a .tm-line)
  const noAgent = el("div", { class: "tm-line tm-warn", testid: "tm-no-agent" });
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
    demo,
    process,
    noAgent,
  );

  return {
    el: root,
    /** @param {import("../contract.js").Snapshot} snap */
    update(snap) {
      const run = isObj(snap.run) ? snap.run : {};
      setText(name, str(run.name) || str(run.id) || "training run");
      setAttr(name, "title", str(run.id) ? `run ${run.id}` : null);
      // Only a known state becomes a class name; anything else is shown as text, unstyled.
      const s = str(run.state);
      setText(state, stateText(run) || "waiting");
      state.className = `tm-badge tm-state-${STATES.includes(s) ? s : "unknown"}`;
      setText(step, count(snap.step));
      setText(elapsed, duration(snap.elapsed_s));
      setText(segment, isNum(run.segment) && run.segment > 1 ? `segment ${run.segment}` : "");
      setText(model, headerModelLine(snap));
      const d = demonstration(snap);
      setText(demo, d ? d.text : "");
      setAttr(demo, "title", d ? d.banner : null);
      demo.hidden = !d;
      setText(process, processLine(snap.process));
      const why = isObj(snap.process) ? noteAbout(snap.notes, /^no agent:/) : "";
      setText(noAgent, why);
      noAgent.hidden = !why;
    },
  };
}

/**
 * The header's model line: the model with the run's own dtype (the agent's `run_dtype`; the one
 * `--dtype` declares for the peak only when the agent saw none) and its own device (the core's
 * `device_text`: never a fake GPU's).
 * @param {import("../contract.js").Snapshot} snap
 */
export function headerModelLine(snap) {
  const m = isObj(snap.model) ? snap.model : null;
  return modelLine(m, deviceLine(snap), (m && str(m.run_dtype)) || str(snap.dtype));
}

/** "GPT · 820k params · 4 layers × 128 · seq 128 · fp32 · cpu" from whatever is known. */
/** `dtype`: the run's own dtype (the agent's). */
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

/**
 * "process 4242 · alice · python train.py · started 2025-11-30 09:15 · CPU 98.0% · RSS 1.20 GiB ·
 * 14 threads · 2 children" from the snapshot's `process` (tm attach); "ended" replaces the figures
 * once it has ended. CPU % is top's: 100% is one CPU busy.
 */
export function processLine(p) {
  if (!isObj(p) || !isNum(p.pid)) return "";
  const parts = [`process ${p.pid}`];
  if (str(p.user)) parts.push(p.user);
  else if (isNum(p.uid)) parts.push(`uid ${p.uid}`);
  if (str(p.cmdline)) parts.push(p.cmdline.length > 120 ? `${p.cmdline.slice(0, 119)}…` : p.cmdline);
  if (isNum(p.started)) parts.push(`started ${dateTime(p.started)}`);
  if (p.alive === false) {
    parts.push(isNum(p.ended) ? `ended ${dateTime(p.ended)}` : "ended");
    return parts.join(" · ");
  }
  if (isNum(p.cpu_percent)) parts.push(`CPU ${p.cpu_percent.toFixed(1)}%`);
  if (isNum(p.rss_bytes)) parts.push(`RSS ${bytes(p.rss_bytes)}`);
  if (isNum(p.threads)) parts.push(`${count(p.threads)} thread${p.threads === 1 ? "" : "s"}`);
  if (isNum(p.children)) parts.push(`${count(p.children)} child${p.children === 1 ? "" : "ren"}`);
  return parts.join(" · ");
}

export { isObj, str };
