// A small stand-in for the browser's DOM, enough for the dashboard to mount and draw in node
// (js/dashboard.js and the panels: elements, text nodes, attributes, classes, `hidden`, styles, a
// class or attribute selector). No layout and no canvas: a chart slot that would draw a chart is
// not reached as long as the store holds no series (its slot says why instead). `install()` puts
// `document`, `window` and the few globals the dashboard touches on globalThis; `visibleText(root)`
// gives what a person sees: each text node and each title outside a hidden element.

class Node {
  constructor() {
    this.parentNode = null;
    this.childNodes = [];
  }
  get textContent() {
    return this.childNodes.map((c) => c.textContent).join("");
  }
  remove() {
    if (!this.parentNode) return;
    const siblings = this.parentNode.childNodes;
    siblings.splice(siblings.indexOf(this), 1);
    this.parentNode = null;
  }
}

class Text extends Node {
  constructor(data) {
    super();
    this.data = String(data);
  }
  get textContent() {
    return this.data;
  }
  set textContent(v) {
    this.data = String(v);
  }
  get nodeValue() {
    return this.data;
  }
}

const toNode = (x) => (x instanceof Node ? x : new Text(x));

class ClassList {
  constructor(el) {
    this.el = el;
  }
  get names() {
    return this.el.className.split(/\s+/).filter(Boolean);
  }
  contains(c) {
    return this.names.includes(c);
  }
  add(...cs) {
    this.el.className = [...new Set([...this.names, ...cs])].join(" ");
  }
  remove(...cs) {
    this.el.className = this.names.filter((n) => !cs.includes(n)).join(" ");
  }
  toggle(c, on) {
    const want = on === undefined ? !this.contains(c) : Boolean(on);
    if (want) this.add(c);
    else this.remove(c);
    return want;
  }
}

export class Element extends Node {
  constructor(tag) {
    super();
    this.tagName = tag.toUpperCase();
    this.attributes = new Map();
    this.className = "";
    this.dataset = {};
    this.style = {};
    this.hidden = false;
    this.classList = new ClassList(this);
    this.listeners = {};
  }
  get textContent() {
    return super.textContent;
  }
  set textContent(v) {
    for (const c of this.childNodes) c.parentNode = null;
    this.childNodes = v === "" ? [] : [new Text(v)];
    if (this.childNodes.length) this.childNodes[0].parentNode = this;
  }
  get children() {
    return this.childNodes.filter((c) => c instanceof Element);
  }
  get title() {
    return this.getAttribute("title") ?? "";
  }
  set title(v) {
    this.setAttribute("title", v);
  }
  setAttribute(name, value) {
    this.attributes.set(name, String(value));
  }
  getAttribute(name) {
    return this.attributes.has(name) ? this.attributes.get(name) : null;
  }
  hasAttribute(name) {
    return this.attributes.has(name);
  }
  removeAttribute(name) {
    this.attributes.delete(name);
  }
  append(...nodes) {
    for (const n of nodes.map(toNode)) {
      n.remove();
      n.parentNode = this;
      this.childNodes.push(n);
    }
  }
  replaceChildren(...nodes) {
    for (const c of this.childNodes) c.parentNode = null;
    this.childNodes = [];
    this.append(...nodes);
  }
  before(...nodes) {
    const parent = this.parentNode;
    if (!parent) return;
    for (const n of nodes.map(toNode)) {
      n.remove();
      n.parentNode = parent;
      parent.childNodes.splice(parent.childNodes.indexOf(this), 0, n);
    }
  }
  addEventListener(type, fn) {
    (this.listeners[type] ||= []).push(fn);
  }
  removeEventListener(type, fn) {
    this.listeners[type] = (this.listeners[type] || []).filter((f) => f !== fn);
  }
  /** Descendants matching a selector list of `.class`, `tag` or `[data-testid="x"]` parts. */
  querySelectorAll(selector) {
    const tests = selector.split(",").map((s) => s.trim()).map(matcher);
    const out = [];
    const walk = (el) => {
      for (const c of el.children) {
        if (tests.some((t) => t(c))) out.push(c);
        walk(c);
      }
    };
    walk(this);
    return out;
  }
  querySelector(selector) {
    return this.querySelectorAll(selector)[0] ?? null;
  }
}

function matcher(sel) {
  const testid = /^\[data-testid="?([^"\]]+)"?\]$/.exec(sel);
  if (testid) return (el) => el.dataset.testid === testid[1];
  if (sel.startsWith(".")) return (el) => el.classList.contains(sel.slice(1));
  return (el) => el.tagName === sel.toUpperCase();
}

/** `document`, `window`, MutationObserver and getComputedStyle on globalThis. */
export function install() {
  const body = new Element("body");
  globalThis.document = {
    body,
    createElement: (tag) => new Element(tag),
    createTextNode: (text) => new Text(text),
    getElementById: () => null,
  };
  globalThis.window ??= globalThis;
  globalThis.MutationObserver ??= class {
    observe() {}
    disconnect() {}
  };
  globalThis.getComputedStyle ??= () => ({ getPropertyValue: () => "" });
  return body;
}

/**
 * What a person sees in `root`: [{text, where}] for each text node and each title (a tooltip) of
 * an element that is not hidden, nor inside a hidden one; `where` is the nearest data-testid or
 * class name above it.
 * @param {Element} root
 */
export function visibleText(root) {
  const out = [];
  const walk = (node, where) => {
    if (node instanceof Text) {
      if (node.data.trim()) out.push({ text: node.data, where });
      return;
    }
    if (node.hidden) return;
    const here = node.dataset.testid || node.className.split(" ")[0] || where;
    if (node.getAttribute("title")) out.push({ text: node.getAttribute("title"), where: `${here} (title)` });
    for (const c of node.childNodes) walk(c, here);
  };
  walk(root, "");
  return out;
}

/** The first element under `root` whose data-testid is `id`, or null. */
export const byTestid = (root, id) => root.querySelector(`[data-testid="${id}"]`);
