// The price typed into the dashboard stays in the browser (the physics-not-prices invariant): no module
// of the dashboard can send it anywhere. Checked on the source, comments stripped: nothing writes
// to the anywidget model or sends a message (widget.js only reads traits and custom messages),
// and nothing stores anything in the browser or makes a request.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import test from "node:test";

const JS = new URL("..", import.meta.url).pathname;
const code = (text) => text.replace(/\/\*[\s\S]*?\*\//g, "").replace(/(^|[^:"'`])\/\/.*$/gm, "$1");
const sources = () =>
  readdirSync(JS, { recursive: true })
    .filter((f) => f.endsWith(".js") && !f.startsWith("tests"))
    .map((f) => [f, code(readFileSync(join(JS, f), "utf8"))]);

test("nothing in the dashboard writes to the widget model or sends a message", () => {
  const seen = sources();
  assert.ok(seen.length > 10, "the dashboard's modules were read");
  for (const [file, text] of seen) {
    assert.doesNotMatch(text, /(^|[^.\w])model\.set\(|save_changes|\.send\(/m, file);
  }
  // the check can fail: a line that would send the price is caught
  assert.match(code('model.set("price", 2.5); // x'), /(^|[^.\w])model\.set\(/m);
});

test("the price is never stored in the browser either (no storage, cookies or requests)", () => {
  for (const [file, text] of sources()) {
    if (file === "page.js") continue; // the page host opens its event stream (read only)
    assert.doesNotMatch(text, /localStorage|sessionStorage|document\.cookie|fetch\(|XMLHttpRequest/, file);
  }
});
