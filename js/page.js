// Page entry for the `tm` dashboard (served on loopback; the host arrives in a later milestone). It
// mounts the same dashboard as the widget into #app from window.TRAINMETER_STATE = {snapshot, history}
// and exposes the store as window.trainmeter.store, so the host's script can feed it live with
// store.setSnapshot(s), store.applyPoints({seq, series}) and store.setHistory(h).

import "uplot/dist/uPlot.min.css";
import "./style.css";
import { version } from "../package.json";
import { mount } from "./dashboard.js";
import { createStore } from "./state.js";

export function boot(target, state = {}) {
  const store = createStore();
  store.setHistory(state.history);
  store.setSnapshot(state.snapshot);
  const unmount = mount(target, store);
  return { store, version, unmount };
}

const app = typeof document !== "undefined" ? document.getElementById("app") : null;
if (app) window.trainmeter = boot(app, window.TRAINMETER_STATE || {});
else if (typeof document !== "undefined") console.warn("[trainmeter] no #app element to mount into");
