// anywidget entry. initialize() runs once per model and owns the store, so every view of the widget
// (a re-render, a cell scrolled back into view, a second view of the same widget) draws the full
// state, including "points" deltas that arrived while no view existed. render() draws from that store.

import "uplot/dist/uPlot.min.css";
import "./style.css";
import { version as BUNDLE_VERSION } from "../package.json";
import { mount } from "./dashboard.js";
import { createStore } from "./state.js";

// anywidget hands initialize() and render() different proxy objects for the same model, so the store
// is found again through something both proxies return identically: the model's `layout` attribute
// (the LayoutModel object in Jupyter, an "IPY_MODEL_<id>" string in some other hosts), unique per
// widget. A host without it still works: each view then keeps its own store.
const stores = new Map();
const keyOf = (model) => {
  const key = model.get("layout");
  return (typeof key === "object" && key !== null) || (typeof key === "string" && key) ? key : null;
};

let warnedVersion = false;
function checkVersion(model) {
  const python = model.get("version");
  if (python === BUNDLE_VERSION || warnedVersion) return;
  warnedVersion = true;
  console.warn(
    `[trainmeter] version mismatch: Python package ${python ?? "(unknown)"}, front-end bundle ` +
      `${BUNDLE_VERSION}. Rebuild the bundle (npm run build) or reinstall trainmeter, then reload the page.`,
  );
}

/** Feed `store` from the model's traits and custom messages; returns the unsubscribe. */
function connect(model, store) {
  const onSnapshot = () => store.setSnapshot(model.get("snapshot"));
  const onHistory = () => store.setHistory(model.get("history"));
  const onMessage = (msg) => {
    if (msg && msg.type === "points") store.applyPoints(msg);
  };
  model.on("change:snapshot", onSnapshot);
  model.on("change:history", onHistory);
  model.on("msg:custom", onMessage);
  onHistory();
  onSnapshot();
  return () => {
    model.off("change:snapshot", onSnapshot);
    model.off("change:history", onHistory);
    model.off("msg:custom", onMessage);
  };
}

function initialize({ model }) {
  checkVersion(model);
  const store = createStore();
  const disconnect = connect(model, store);
  const key = keyOf(model);
  if (key !== null) stores.set(key, store);
  return () => {
    disconnect();
    if (key !== null && stores.get(key) === store) stores.delete(key);
  };
}

function render({ model, el }) {
  let store = stores.get(keyOf(model));
  let disconnect = null;
  if (!store) {
    store = createStore();
    disconnect = connect(model, store);
  }
  const unmount = mount(el, store, { version: BUNDLE_VERSION });
  return () => {
    unmount();
    disconnect?.();
  };
}

export default { initialize, render };
