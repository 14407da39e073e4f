// What the type check (jsconfig.json, run by `npm test`) cannot see in the front end's sources.

// esbuild bundles the stylesheets a module imports (page.js, widget.js); they have no types.
declare module "*.css";

interface Window {
  /** A page without a server (a saved file) draws this state (page.js). */
  TRAINMETER_STATE?: { snapshot?: object; history?: object };
  /** The page's store, version, unmount and events, kept for tests and the curious (page.js). */
  trainmeter?: object;
}
