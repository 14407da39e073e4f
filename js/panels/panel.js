// A dashboard panel: a <details> section (open by default) with a title line and a body. The
// data-testid sits on the <details> element: tm-panel-<id>.

import { demonstration } from "../derive.js";
import { el, setText } from "../dom.js";

export function createPanel(id, title, { open = true } = {}) {
  const summary = el("span", { class: "tm-panel-summary" });
  const body = el("div", { class: `tm-panel-body tm-${id}-body` });
  const root = el(
    "details",
    { class: `tm-panel tm-panel-${id}`, testid: `tm-panel-${id}` },
    el("summary", { class: "tm-panel-title" }, el("span", { class: "tm-panel-name", text: title }), summary),
    body,
  );
  root.open = open;
  return {
    el: root,
    body,
    /** A short line beside the title, still readable when the panel is folded. */
    summarize(text) {
      setText(summary, text);
    },
  };
}

/** A row of label / value pairs (a <dl>), each value a {value node, sub node} updated in place. */
export function createFacts(rows) {
  const out = {};
  const dl = el("dl", { class: "tm-facts" });
  for (const [key, label, testid] of rows) {
    const value = el("span", { class: "tm-fact-value", testid });
    const sub = el("span", { class: "tm-fact-sub" });
    const dt = el("dt", { text: label });
    const dd = el("dd", {}, value, sub);
    dl.append(dt, dd);
    out[key] = {
      /** show or hide the whole row (a fact only some runs have) */
      show(on) {
        dt.hidden = dd.hidden = !on;
      },
      /** text, optional small text after it (a convention tag, a reason), muted for unknowns */
      set(text, { subText = "", muted = false } = {}) {
        setText(value, text);
        setText(sub, subText ? ` ${subText}` : "");
        value.classList.toggle("tm-unknown", muted);
      },
      value,
    };
  }
  return { el: dl, row: out };
}

/**
 * The demonstration banner: on a run whose GPU figures come from a scripted fake backend
 * (`tm --gpu-backend fake:...`), the core's words ("demonstration, not a measurement: ...") at
 * the top of each panel that shows them; hidden for a real run.
 */
export function createBanner() {
  const root = el("div", { class: "tm-banner", testid: "tm-demo-banner", role: "note" });
  root.hidden = true;
  return {
    el: root,
    /** @param {import("../contract.js").Snapshot} snap */
    update(snap) {
      const d = demonstration(snap);
      const text = d ? d.banner : "";
      setText(root, text);
      root.hidden = !text;
    },
  };
}
