// One "big figure": a small label, a large value (with an optional [convention] tag) and a small line
// under it. The data-testid sits on the value so a test reads exactly what a person reads; with
// `numTestid` it sits on the number alone, and `tagTestid` marks the convention name.
//
// A figure that is not known shows a short muted headline ("not measured yet", "no MFU") followed
// by its reason in small type, inside the value: never a zero in place of an unknown.

import { splitReason } from "../derive.js";
import { el, setAttr, setReason, setText } from "../dom.js";

export function createFigure(label, testid, { wide = false, numTestid = null, tagTestid = null } = {}) {
  // The number is a text node; the reason of an unknown figure sits inside the same span, so the
  // number's testid reads "no MFU: no dense peak is known for cpu" as a whole.
  const numText = document.createTextNode("");
  const why = el("span", { class: "tm-why" });
  const num = el("span", { class: "tm-num", testid: numTestid }, numText, why);
  const unit = el("span", { class: "tm-unit" });
  const tagName = el("span", { class: "tm-tag-name", testid: tagTestid });
  const tagOpen = document.createTextNode("");
  const tagClose = document.createTextNode("");
  const tag = el("span", { class: "tm-tag" }, tagOpen, tagName, tagClose);
  const value = el("div", { class: "tm-value", testid: numTestid ? null : testid }, num, unit, tag);
  const sub = el("div", { class: "tm-sub", testid: testid ? `${testid}-sub` : null });
  const labelNode = el("div", { class: "tm-label", text: label });
  const root = el("div", { class: wide ? "tm-fig tm-fig-wide" : "tm-fig" }, labelNode, value, sub);

  function setTag(text) {
    // Spaces live in the text so that textContent reads "5.30 MFLOP/token [titan]".
    tagOpen.data = text ? " [" : "";
    setText(tagName, text);
    tagClose.data = text ? "]" : "";
  }

  return {
    el: root,
    /** value text, unit (small, after the value), tag (a convention name, shown as "[name]"). */
    set(text, { unitText = "", tagText = "", subText = "", title = null, muted = false } = {}) {
      if (numText.data !== String(text)) numText.data = String(text);
      setText(why, "");
      setText(unit, unitText ? ` ${unitText}` : "");
      setTag(tagText);
      setText(sub, subText);
      setAttr(root, "title", title);
      root.classList.toggle("tm-muted", muted);
    },
    /**
     * An unknown figure: `headline` large and muted, then its reason small, so the value reads
     * "no MFU: no dense peak is known for cpu" or "not measured yet: ...".
     */
    missing(headline, reason = "", { subText = "" } = {}) {
      if (numText.data !== String(headline)) numText.data = String(headline);
      setReason(why, reason ? `: ${reason}` : "");
      setText(unit, "");
      setTag("");
      setText(sub, subText);
      setAttr(root, "title", null);
      root.classList.toggle("tm-muted", true);
    },
    setLabel(text) {
      setText(labelNode, text);
    },
    /** Extra content under the sub line (a progress bar, a list of other conventions). */
    append(node) {
      root.append(node);
    },
  };
}

/**
 * Show a {value, why} figure: a known value formatted, or the reason it is missing. A reason that
 * starts "no MFU: ..." or "not measured yet: ..." is split into headline and reason.
 */
export function showFigure(fig, item, fmt, opts = {}) {
  if (item.value !== null && item.value !== undefined) {
    fig.set(fmt(item.value), opts);
    return;
  }
  const [headline, ...rest] = splitReason(item.why);
  fig.missing(headline, rest.join(": "), { subText: opts.missingSub || "" });
}
