// One "big figure": a small label, a large value (with an optional [convention] tag) and a small line
// under it. The data-testid sits on the value so a test reads exactly what a person reads.

import { el, setAttr, setText } from "../dom.js";

export function createFigure(label, testid, { wide = false } = {}) {
  const num = el("span", { class: "tm-num" });
  const unit = el("span", { class: "tm-unit" });
  const tag = el("span", { class: "tm-tag" });
  const value = el("div", { class: "tm-value", testid }, num, unit, tag);
  const sub = el("div", { class: "tm-sub", testid: `${testid}-sub` });
  const root = el(
    "div",
    { class: wide ? "tm-fig tm-fig-wide" : "tm-fig" },
    el("div", { class: "tm-label", text: label }),
    value,
    sub,
  );
  return {
    el: root,
    /** value text, unit (small, after the value), tag (a convention name, shown as "[name]"). */
    set(text, { unitText = "", tagText = "", subText = "", title = null, muted = false } = {}) {
      setText(num, text);
      // Spaces live in the text so that textContent reads "5.30 MFLOP/token [titan]".
      setText(unit, unitText ? ` ${unitText}` : "");
      setText(tag, tagText ? ` [${tagText}]` : "");
      setText(sub, subText);
      setAttr(root, "title", title);
      root.classList.toggle("tm-muted", muted);
    },
    /** Extra content under the sub line (a progress bar, a list of other conventions). */
    append(node) {
      root.append(node);
    },
  };
}
