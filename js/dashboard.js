// Mounts the dashboard into an element and keeps it in step with a store. Shared by both hosts: the
// anywidget view (widget.js) and the `tm` page (page.js).
//
// Drawing is decoupled from updates: a store change only schedules one requestAnimationFrame, and the
// frame draws whatever is newest, so a burst of messages costs one redraw. Charts get setData, never a
// new chart, unless the set of series changes.

import { readTheme } from "./charts.js";
import { el } from "./dom.js";
import { createCockpit } from "./panels/cockpit.js";
import { createEfficiency } from "./panels/efficiency.js";
import { createHeader, isObj } from "./panels/header.js";

// Wrapped in arrows: called as methods of `raf`, the browser's functions would throw "Illegal invocation".
const raf =
  typeof requestAnimationFrame === "function"
    ? { request: (fn) => requestAnimationFrame(fn), cancel: (id) => cancelAnimationFrame(id) }
    : { request: (fn) => setTimeout(fn, 16), cancel: (id) => clearTimeout(id) };

/**
 * Mount into `target` and draw from `store` (see state.js). Returns a cleanup that removes the DOM,
 * the listeners, the observers and the charts.
 */
export function mount(target, store) {
  const header = createHeader();
  const cockpit = createCockpit();
  const efficiency = createEfficiency();
  const notes = el("ul", { class: "tm-notes", testid: "tm-notes" });
  const root = el("div", { class: "tm-root" }, header.el, cockpit.el, efficiency.el, notes);
  target.append(root);

  const drawn = { snapshot: -1, history: -1 };
  let frame = 0;
  let failed = false;

  function draw() {
    frame = 0;
    const historyChanged = drawn.history !== store.rev.history;
    drawn.snapshot = store.rev.snapshot;
    drawn.history = store.rev.history;
    const snap = isObj(store.snapshot) ? store.snapshot : {};
    try {
      header.update(snap);
      cockpit.update(snap, store, historyChanged);
      efficiency.update(snap);
      drawNotes(notes, snap.notes, efficiency.el);
    } catch (err) {
      // One bad snapshot must not take the notebook down; say so once and keep going.
      if (!failed) console.error("[trainmeter] drawing the dashboard failed", err);
      failed = true;
    }
  }
  function schedule() {
    if (!frame) frame = raf.request(draw);
  }

  // Canvas colours come from CSS variables: read them again when JupyterLab or the OS switches theme.
  const retheme = () => {
    cockpit.setTheme(readTheme(root));
    schedule();
  };
  cockpit.setTheme(readTheme(root));
  const themeObserver = new MutationObserver(retheme);
  themeObserver.observe(document.body, {
    attributes: true,
    attributeFilter: ["data-jp-theme-light", "data-jp-theme-name", "class"],
  });
  const media = window.matchMedia?.("(prefers-color-scheme: dark)");
  media?.addEventListener?.("change", retheme);
  // A view created before it is attached reads no CSS variables yet: read them on the first frame.
  const firstFrame = raf.request(() => cockpit.setTheme(readTheme(root)));

  const unsubscribe = store.subscribe(schedule);
  draw();

  return () => {
    unsubscribe();
    raf.cancel(firstFrame);
    if (frame) raf.cancel(frame);
    themeObserver.disconnect();
    media?.removeEventListener?.("change", retheme);
    cockpit.destroy();
    root.remove();
  };
}

/** Notes from the snapshot, one per line; a note already shown as a figure's reason is skipped. */
const drawnNotes = new WeakMap();
function drawNotes(list, notes, shownIn) {
  const shown = new Set([...shownIn.querySelectorAll(".tm-sub")].map((n) => n.textContent));
  const items = Array.isArray(notes) ? notes.filter((n) => typeof n === "string" && n && !shown.has(n)) : [];
  const key = items.join("\n");
  if (drawnNotes.get(list) === key) return;
  drawnNotes.set(list, key);
  list.replaceChildren(...items.map((n) => el("li", { text: n })));
  list.hidden = items.length === 0;
}
