// What one view of the dashboard remembers for itself: the convention picked to be shown large, the
// log-scale switch of the loss chart and the price per GPU-hour typed in. It lives in this page's
// memory only: it is never sent to the kernel or the supervisor (the dashboard holds no model
// handle at all) and never written to localStorage or any other storage, so a price typed into
// one view is gone when the view is.

export function createView() {
  const listeners = new Set();
  const view = {
    convention: "", // "" follows the run's own convention
    logScale: false,
    price: null, // number >= 0, or null
    rev: 0,
    set(key, value) {
      if (view[key] === value) return;
      view[key] = value;
      view.rev += 1;
      for (const fn of listeners) fn(view);
    },
    subscribe(fn) {
      listeners.add(fn);
      return () => listeners.delete(fn);
    },
  };
  return view;
}
