// Tiny DOM helpers. Text goes in through textContent only: run names, series names and notes come
// from training code and are never parsed as HTML.

/** Create an element: el("div", {class: "tm-x", testid: "tm-step", title: "..."}, child, ...). */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null) continue;
    if (key === "class") node.className = value;
    else if (key === "testid") node.dataset.testid = value;
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) if (child) node.append(child);
  return node;
}

/** Set text only when it changed (keeps the DOM quiet at a few updates a second). */
export function setText(node, text) {
  const s = String(text);
  if (node.textContent !== s) node.textContent = s;
}

/** Set or remove an attribute only when it changed. */
export function setAttr(node, name, value) {
  if (value === null || value === undefined) {
    if (node.hasAttribute(name)) node.removeAttribute(name);
  } else if (node.getAttribute(name) !== String(value)) {
    node.setAttribute(name, value);
  }
}

// A command-line flag with its value ("--budget-tokens 20B", "--peak") must not break across lines
// at its hyphens: such runs go in a no-wrap span. Everything stays text nodes.
const FLAG = /--[a-z][\w-]*(?: \d[\w.+-]*)?/g;

/** Set text like setText, keeping command-line flags unbroken; textContent is exactly `text`. */
export function setReason(node, text) {
  const s = String(text);
  if (node.textContent === s) return;
  const parts = [];
  let last = 0;
  for (const m of s.matchAll(FLAG)) {
    if (m.index > last) parts.push(document.createTextNode(s.slice(last, m.index)));
    const span = document.createElement("span");
    span.className = "tm-nowrap";
    span.textContent = m[0];
    parts.push(span);
    last = m.index + m[0].length;
  }
  if (last < s.length) parts.push(document.createTextNode(s.slice(last)));
  node.replaceChildren(...parts);
}
