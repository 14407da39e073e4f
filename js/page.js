// Page entry for the `tm` dashboard, served on loopback by the `tm` process (trainmeter/web/server.py).
// It mounts the same dashboard as the widget into #app and feeds its store from the server's event
// stream ("events", relative to the page so the /t/<token>/ path is kept):
//   event "full"   {snapshot, history: {seq, series}}   replaces the store (first, and on every reconnect)
//   event "delta"  {snapshot, points: {seq, series}}    at most ~4 a second, when something changed
//   event "end"    {}                                   the run is over: the last delta came just before
// A page without a server (a saved file) can still draw window.TRAINMETER_STATE = {snapshot, history}.
// window.trainmeter = {store, version, unmount, events} is kept for tests and for the curious.

import "uplot/dist/uPlot.min.css";
import "./style.css";
import { version } from "../package.json";
import { mount } from "./dashboard.js";
import { createStore } from "./state.js";

export function boot(target, state = {}) {
  const store = createStore();
  store.setHistory(state.history);
  store.setSnapshot(state.snapshot);
  const unmount = mount(target, store, { version });
  return { store, version, unmount };
}

export const STATUS_TEXT = {
  connecting: "connecting to tm…",
  live: "live",
  reconnecting: "reconnecting to tm…",
  ended: "tm has exited: this is the run's final state",
  lost: "lost the connection to tm: this is the last state received",
  closed: "not connected",
};

// EventSource reconnects by itself (the server asks for 2 s between tries); past this many failures in
// a row tm is gone for good (killed, or the machine slept), so stop instead of retrying forever.
const MAX_FAILURES = 15;

/**
 * Feed `store` from the server-sent events at `url`. `onStatus(state)` hears "connecting", "live",
 * "reconnecting", "ended" (the run is over; the stream is closed) or "lost". Returns {close, status}.
 * @param {ReturnType<typeof createStore>} store
 * @param {{url?: string, onStatus?: (state: string) => void, Source?: typeof EventSource}} [options]
 */
export function connect(store, { url = "events", onStatus = () => {}, Source = globalThis.EventSource } = {}) {
  let status = "";
  let failures = 0;
  let done = false;
  const say = (s) => {
    if (s === status) return;
    status = s;
    onStatus(s);
  };
  const read = (ev) => {
    try {
      return JSON.parse(ev.data);
    } catch {
      console.warn("[trainmeter] ignoring an event that is not JSON");
      return null;
    }
  };
  const source = new Source(url);
  const stop = (s) => {
    done = true;
    source.close();
    say(s);
  };
  say("connecting");
  source.addEventListener("open", () => {
    failures = 0;
  });
  source.addEventListener("full", (ev) => {
    const msg = read(ev);
    if (!msg) return;
    store.setHistory(msg.history);
    store.setSnapshot(msg.snapshot);
    say("live");
  });
  source.addEventListener("delta", (ev) => {
    const msg = read(ev);
    if (!msg) return;
    if (msg.points) store.applyPoints(msg.points);
    store.setSnapshot(msg.snapshot);
  });
  source.addEventListener("end", () => stop("ended"));
  source.addEventListener("error", () => {
    if (done) return;
    failures += 1;
    // CLOSED: the server answered something other than a stream (403 from another tm on this port)
    if (source.readyState === 2 || failures >= MAX_FAILURES) stop("lost");
    else say("reconnecting");
  });
  return {
    close: () => stop("closed"),
    get status() {
      return status;
    },
  };
}

function showStatus(node, state) {
  if (!node) return;
  node.dataset.state = state;
  node.textContent = STATUS_TEXT[state] ?? state;
}

const app = typeof document !== "undefined" ? document.getElementById("app") : null;
if (app) {
  const page = boot(app, window.TRAINMETER_STATE || {});
  const served = /^https?:$/.test(window.location?.protocol ?? "") && typeof EventSource === "function";
  if (served) {
    let node = document.getElementById("tm-status");
    if (!node) {
      node = document.createElement("p");
      node.id = "tm-status";
      node.className = "tm-page-status";
      app.before(node);
    }
    page.events = connect(page.store, { onStatus: (s) => showStatus(node, s) });
  }
  window.trainmeter = page;
} else if (typeof document !== "undefined") console.warn("[trainmeter] no #app element to mount into");
