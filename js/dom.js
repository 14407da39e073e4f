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
