// Mounts the dashboard into an element and keeps it in step with a store. Shared by both hosts: the
// anywidget view (widget.js) and the `tm` page (page.js).
//
// Six panels in a responsive grid: cockpit, efficiency, hardware, where the time goes, plan vs
// actual, run passport. Drawing is decoupled from updates: a store change or a control touched in
// this view only schedules one requestAnimationFrame, and the frame draws whatever is newest, so a
// burst of messages costs one redraw. Charts get setData, never a new chart, unless their set of
// series (or the log-scale switch) changes.
//
// The dashboard receives a store and nothing else: it has no handle on the widget model, so what a
// person types here (a price, a convention) cannot reach the kernel or the supervisor.

import { readTheme } from "./charts.js";
import { isObj } from "./derive.js";
import { el, setReason } from "./dom.js";
import { createCockpit } from "./panels/cockpit.js";
import { createEfficiency } from "./panels/efficiency.js";
import { createHardware } from "./panels/hardware.js";
import { createHeader } from "./panels/header.js";
import { createPassport } from "./panels/passport.js";
import { createPlan } from "./panels/plan.js";
import { createTimePanel } from "./panels/time.js";
import { createView } from "./view.js";

/** @typedef {import("./contract.js").Panel} Panel */
/** @typedef {import("./contract.js").PanelContext} PanelContext */

// Wrapped in arrows: called as methods of `raf`, the browser's functions would throw "Illegal invocation".
const raf =
  typeof requestAnimationFrame === "function"
    ? { request: (fn) => requestAnimationFrame(fn), cancel: (id) => cancelAnimationFrame(id) }
    : { request: (fn) => setTimeout(fn, 16), cancel: (id) => clearTimeout(id) };

/**
 * Mount into `target` and draw from `store` (see state.js). `options.version` is the bundle's
 * version (shown in the passport when the snapshot does not name the run's). Returns a cleanup
 * that removes the DOM, the listeners, the observers and the charts.
 * @param {HTMLElement} target
 * @param {ReturnType<typeof import("./state.js").createStore>} store
 * @param {{version?: string}} [options]
 * @returns {() => void}
 */
export function mount(target, store, options = {}) {
  const view = createView();
  const header = createHeader();
  /** @type {Panel[]} */
  const panels = [
    createCockpit(view),
    createEfficiency(view),
    createHardware(),
    createTimePanel(),
    createPlan(view),
    createPassport(view, { bundleVersion: options.version || "" }),
  ];
  const notes = el("ul", { class: "tm-notes", testid: "tm-notes" });
  const grid = el("div", { class: "tm-panels" }, ...panels.map((p) => p.el));
  const root = el("div", { class: "tm-root" }, header.el, grid, notes);
  target.append(root);

  const drawn = { snapshot: -1, history: -1, view: -1 };
  let frame = 0;
  const failed = new Set();

  function draw() {
    frame = 0;
    const historyChanged = drawn.history !== store.rev.history;
    const viewChanged = drawn.view !== view.rev;
    drawn.snapshot = store.rev.snapshot;
    drawn.history = store.rev.history;
    drawn.view = view.rev;
    const snap = isObj(store.snapshot) ? store.snapshot : {};
    /** @type {PanelContext} */
    const ctx = { snap, store, view, historyChanged, viewChanged };
    // One bad snapshot must not take the notebook down, nor one panel the others: each panel draws
    // on its own, and a failure is said once per panel.
    const guard = (name, fn) => {
      try {
        fn();
      } catch (err) {
        if (!failed.has(name)) console.error(`[trainmeter] drawing the ${name} failed`, err);
        failed.add(name);
      }
    };
    guard("header", () => header.update(snap));
    panels.forEach((p, i) => guard(`panel ${p.el.dataset.testid || i}`, () => p.update(ctx)));
    guard("notes", () => drawNotes(notes, snap.notes, root, snap.reasons));
  }
  function schedule() {
    if (!frame) frame = raf.request(draw);
  }

  // Canvas colours come from CSS variables: read them again when JupyterLab or the OS switches theme.
  const setTheme = () => {
    const theme = readTheme(root);
    for (const p of panels) p.setTheme?.(theme);
  };
  const retheme = () => {
    setTheme();
    schedule();
  };
  setTheme();
  const themeObserver = new MutationObserver(retheme);
  themeObserver.observe(document.body, {
    attributes: true,
    attributeFilter: ["data-jp-theme-light", "data-jp-theme-name", "class"],
  });
  const media = window.matchMedia?.("(prefers-color-scheme: dark)");
  media?.addEventListener?.("change", retheme);
  // A view created before it is attached reads no CSS variables yet: read them on the first frame.
  const firstFrame = raf.request(setTheme);

  const unsubscribe = store.subscribe(schedule);
  const unsubscribeView = view.subscribe(schedule);
  draw();

  return () => {
    unsubscribe();
    unsubscribeView();
    raf.cancel(firstFrame);
    if (frame) raf.cancel(frame);
    themeObserver.disconnect();
    media?.removeEventListener?.("change", retheme);
    for (const p of panels) p.destroy?.();
    root.remove();
  };
}

/**
 * Notes from the snapshot, one per line. A note that is one of the core's reasons (`reasons`: said
 * where its figure is, in the same words) or already shown on screen is skipped, so the footer
 * never says a reason again, in its words or others.
 */
const drawnNotes = new WeakMap();
function drawNotes(list, notes, root, reasons) {
  const shown = new Set(
    [...root.querySelectorAll(".tm-sub, .tm-num, .tm-line, .tm-empty, .tm-fact-value")].map((n) => n.textContent),
  );
  if (isObj(reasons)) for (const why of Object.values(reasons)) if (typeof why === "string") shown.add(why);
  const items = Array.isArray(notes) ? notes.filter((n) => typeof n === "string" && n && !shown.has(n)) : [];
  const key = items.join("\n");
  if (drawnNotes.get(list) === key) return;
  drawnNotes.set(list, key);
  list.replaceChildren(
    ...items.map((n) => {
      const li = el("li");
      setReason(li, n);
      return li;
    }),
  );
  list.hidden = items.length === 0;
}
