// Headless Chromium for scripts/screenshot.py: takes the pictures a job file lists, with Playwright
// (the npm dev package the UI tests use; Debian's /usr/bin/chromium, never a downloaded browser).
//
//   node scripts/screenshot.mjs JOB.json
//
// JOB: {chromium, pages: [{url, width, height, colorScheme, waitStep, act, shots: [{png, panel,
// inPlace}]}]}. Each page is opened once; `waitStep` waits until the dashboard's step reaches it (a
// live run), `act` uses the view's controls as a person would (convention hf, log scale, a price),
// and each shot is the whole page; with `panel` the header, that one panel alone, full width, and
// the notes (one says when the GPU counters come from a fake backend, a demonstration); with
// `panel` and `inPlace` that panel as it sits in the whole dashboard at this width, nothing moved
// (a text of it that runs past its right edge is an error). Prints one JSON line: {shots: [png...],
// errors: [console errors, page errors, cut texts]}.
import fs from 'node:fs';

import { chromium } from 'playwright';

const job = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const browser = await chromium.launch({
  executablePath: job.chromium,
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
    '--disable-sync', '--no-first-run', '--disable-quic', '--hide-scrollbars'],
});
const shots = [];
const errors = [];

/** The step the header shows, as a number (NaN before the first step). */
async function step(page) {
  const text = await page.getByTestId('tm-step').first().textContent();
  return Number(String(text).replace(/[^0-9]/g, '') || NaN);
}

/** Show only the header, panel `id` (full width, in the grid's first row: none of the rows the
 * others are placed in is left as a gap) and the notes, or everything again with null. */
async function only(page, id) {
  await page.evaluate((id) => {
    document.querySelectorAll('.tm-panels').forEach((g) => {
      g.style.gridTemplateRows = id ? 'none' : '';
    });
    document.querySelectorAll('[data-testid^="tm-panel-"]').forEach((p) => {
      p.style.display = id && p.dataset.testid !== `tm-panel-${id}` ? 'none' : '';
      p.style.gridArea = id ? 'auto / 1 / auto / -1' : '';
    });
  }, id);
}

/** The texts of panel `id` that run past its right edge (cut there, or out of the box): a list of
 * "panel <id>: '<text>' runs N px past its right edge" lines. */
async function cutTexts(page, id) {
  return page.evaluate((id) => {
    const panel = document.querySelector(`[data-testid="tm-panel-${id}"]`);
    if (!panel) return [];
    const edge = panel.getBoundingClientRect().right;
    const out = [];
    for (const node of panel.querySelectorAll('*')) {
      if (node.children.length || !node.textContent.trim() || node.closest('.tm-plot, .tm-table-scroll')) continue;
      const r = node.getBoundingClientRect();
      if (r.width && r.right > edge + 0.5) {
        out.push(`panel ${id}: '${node.textContent.trim().slice(0, 60)}' runs ${Math.ceil(r.right - edge)} px past its right edge`);
      }
    }
    return out;
  }, id);
}

/** Two animation frames and a moment: the charts redraw at their new size. */
async function settle(page) {
  await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
  await page.waitForTimeout(400);
}

try {
  for (const spec of job.pages) {
    const context = await browser.newContext({
      viewport: { width: spec.width, height: spec.height },
      colorScheme: spec.colorScheme || 'light',
      deviceScaleFactor: 1,
    });
    const page = await context.newPage();
    page.on('console', (m) => {
      if (m.type() === 'error') errors.push(`${spec.url}: ${m.text()}`);
    });
    page.on('pageerror', (e) => errors.push(`${spec.url}: ${e.message}`));
    await page.goto(spec.url);
    await page.getByTestId('tm-step').first().waitFor({ timeout: 60_000 });
    if (spec.waitStep) {
      const until = Date.now() + 480_000; // a machine shared with other work trains slowly
      while (!((await step(page)) >= spec.waitStep)) {
        if (Date.now() > until) throw new Error(`${spec.url}: the step did not reach ${spec.waitStep}`);
        await page.waitForTimeout(250);
      }
    }
    if (spec.act) {
      await page.getByTestId('tm-convention').selectOption('hf');
      await page.getByTestId('tm-log-scale').check();
      await page.getByTestId('tm-price').fill('2.5');
    }
    for (const shot of spec.shots) {
      await only(page, shot.panel && !shot.inPlace ? shot.panel : null);
      await settle(page);
      if (shot.panel && shot.inPlace) {
        // the whole page in the viewport (same width, so the same layout): a panel taller than
        // the window is still shot whole
        const tall = await page.evaluate(() => document.documentElement.scrollHeight);
        if (tall > spec.height) await page.setViewportSize({ width: spec.width, height: tall });
        await settle(page);
        await page.getByTestId(`tm-panel-${shot.panel}`).first().screenshot({ path: shot.png, animations: 'disabled' });
        for (const line of await cutTexts(page, shot.panel)) errors.push(`${spec.url} at ${spec.width} px: ${line}`);
      } else if (shot.panel) await page.locator('.tm-root').first().screenshot({ path: shot.png, animations: 'disabled' });
      else await page.screenshot({ path: shot.png, fullPage: true, animations: 'disabled' });
      shots.push(shot.png);
    }
    await context.close();
  }
} finally {
  await browser.close();
  process.stdout.write(`${JSON.stringify({ shots, errors })}\n`);
}
