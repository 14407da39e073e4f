// Checks shared by the notebook widget test and the `tm` page test: both hosts mount the same
// dashboard (js/dashboard.js), so they must pass the same checks. Everything is found by its
// data-testid, the contract between the dashboard and these tests.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { expect, test, type ConsoleMessage, type Locator, type Page, type TestInfo } from '@playwright/test';

export const HERE = path.dirname(fileURLToPath(import.meta.url));
export const REPO = path.resolve(HERE, '..', '..');
export const SCREENSHOTS = path.join(HERE, 'screenshots');

/** The series name the training code emits once: it must show as text, never as an element. */
export const MARKUP = '<img src=x onerror=alert(1)>';

export const PANELS = [
  'tm-panel-cockpit',
  'tm-panel-efficiency',
  'tm-panel-hardware',
  'tm-panel-time',
  'tm-panel-plan',
  'tm-panel-passport'
];

export const CONVENTIONS = ['hf', 'megatron', 'titan', 'embeddings'];

/** The first integer in a text such as "1,234" or "step 42"; null when there is none ("—"). */
export function firstInt(text: string | null): number | null {
  const m = (text ?? '').replace(/[,\u202f\u00a0_]/g, '').match(/\d+/);
  return m ? Number(m[0]) : null;
}

/**
 * Collects what would mean the dashboard broke or ran injected code: console errors and uncaught
 * exceptions (all of them, the caller decides which are the widget's) and any dialog (an
 * `alert(1)` from the markup-named series). Dialogs are dismissed so the page never blocks.
 */
export function watchPage(page: Page) {
  const errors: string[] = [];
  const dialogs: string[] = [];
  page.on('console', (msg: ConsoleMessage) => {
    if (msg.type() !== 'error') return;
    const where = msg.location()?.url ?? '';
    errors.push(`${msg.text()}${where ? ` (at ${where})` : ''}`);
  });
  page.on('pageerror', (err) => errors.push(`uncaught: ${err.message}\n${err.stack ?? ''}`));
  page.on('dialog', async (dialog) => {
    dialogs.push(`${dialog.type()}: ${dialog.message()}`);
    await dialog.dismiss().catch(() => undefined);
  });
  return { errors, dialogs };
}

/**
 * Whether a console error came from trainmeter's front-end (its bundle or its own messages). By
 * the bundle's names and the messages' `[trainmeter]` prefix, never by a bare "trainmeter": the
 * checkout's own folder (and any path under it) may be called that.
 */
export function isDashboardError(line: string): boolean {
  return /\[trainmeter\]|anywidget|\btm-|uplot|\/static\/(widget|page)\.js/i.test(line);
}

/**
 * Save `locator` as a PNG under tests/ui/screenshots/ and attach it to the report. The viewport
 * grows to hold the whole element first: a screenshot of an element taller than the viewport,
 * inside a scrolling panel like JupyterLab's, comes out with the page's chrome painted over it.
 */
export async function screenshot(locator: Locator, name: string, testInfo: TestInfo) {
  fs.mkdirSync(SCREENSHOTS, { recursive: true });
  const file = path.join(SCREENSHOTS, `${name}.png`);
  const page = locator.page();
  const viewport = page.viewportSize();
  const box = await locator.boundingBox();
  if (viewport && box && box.height + 240 > viewport.height) {
    await page.setViewportSize({ width: viewport.width, height: Math.ceil(box.height) + 240 });
  }
  try {
    await page.evaluate(() => (document.activeElement as HTMLElement | null)?.blur?.()); // no focus ring
    await locator.scrollIntoViewIfNeeded();
    await page.waitForTimeout(300); // one frame for the charts to redraw at the new size
    await locator.screenshot({ path: file, animations: 'disabled' });
  } finally {
    if (viewport) await page.setViewportSize(viewport);
  }
  await testInfo.attach(name, { path: file, contentType: 'image/png' });
  return file;
}

/**
 * Run `body` as a report step; if it fails, record a soft failure (the test goes on and fails at
 * the end) so one run reports every check that fails, not only the first.
 */
export async function softStep(name: string, body: () => Promise<unknown>) {
  try {
    await test.step(name, async () => {
      await body();
    });
  } catch (e) {
    expect.soft(null, `${name}: ${(e as Error).message}`).toBeTruthy();
  }
}

/** The six panels are drawn (soft: every missing one is reported, the test goes on). */
export async function checkPanels(root: Locator) {
  for (const id of PANELS) {
    await expect.soft(root.getByTestId(id), `panel ${id}`).toBeVisible({ timeout: 5_000 });
  }
}

/**
 * tm-step shows a number that increases while `running()` still says the run goes on. Returns
 * the two step numbers seen.
 */
export async function checkStepClimbs(root: Locator, running: () => Promise<boolean>) {
  const step = root.getByTestId('tm-step');
  await expect(step).toBeVisible();
  let first: number | null = null;
  await expect
    .poll(async () => (first = firstInt(await step.textContent())), {
      message: 'tm-step shows a step number',
      timeout: 60_000
    })
    .not.toBeNull();
  let later: number | null = null;
  await expect
    .poll(async () => (later = firstInt(await step.textContent())) ?? -1, {
      message: `tm-step climbs past ${first}`,
      timeout: 60_000 // the first step waits for torch's import and the model: slow on a busy machine
    })
    .toBeGreaterThan(first!);
  expect(await running(), 'the run is still going when tm-step has climbed').toBe(true);
  return { first: first!, later: later! };
}

/**
 * Switching the MFU convention with the select changes the convention named beside MFU and the
 * MFU figure itself (the conventions count different FLOPs per token for the same run).
 */
export async function checkConventionSwitch(root: Locator) {
  const select = root.getByTestId('tm-convention');
  const name = root.getByTestId('tm-mfu-convention');
  const mfu = root.getByTestId('tm-mfu');
  await expect(select).toBeVisible({ timeout: 5_000 });
  const values = await select.locator('option').evaluateAll((os) => os.map((o) => (o as HTMLOptionElement).value));
  expect(values.sort()).toEqual([...CONVENTIONS].sort());
  // An MFU figure exists (--peak 1T declares a dense peak, so there is MFU on CPU) once two steps
  // have been timed.
  await expect(mfu).toHaveText(/\d/, { timeout: 45_000 });
  const current = await select.inputValue();
  const target = current === 'hf' ? 'megatron' : 'hf';
  const nameBefore = (await name.textContent()) ?? '';
  const mfuBefore = (await mfu.textContent()) ?? '';
  await select.selectOption(target);
  await expect(name).not.toHaveText(nameBefore);
  await expect(name).toHaveText(new RegExp(`\\b${target}\\b`, 'i')); // MFU names its convention
  await expect(mfu).not.toHaveText(mfuBefore);
  await expect(mfu).toHaveText(/\d/);
  return { from: current, to: target, mfuBefore, mfuAfter: await mfu.textContent() };
}

/** A price per GPU-hour typed into tm-price shows a dollar amount in tm-dollars-spent. */
export async function checkPrice(root: Locator, value = '2.50') {
  const price = root.getByTestId('tm-price');
  await expect(price).toBeVisible({ timeout: 5_000 });
  await price.fill(value);
  await price.press('Tab'); // a `change` listener sees it too, not only an `input` one
  await expect(root.getByTestId('tm-dollars-spent')).toHaveText(/\$\s*\d/);
}

/**
 * The markup-named series shows literally, as text, in the series table, and nothing in the
 * dashboard became an <img> element.
 */
export async function checkMarkupIsText(root: Locator, page: Page) {
  await expect.soft(root, 'the markup-named series shows as text in the dashboard').toContainText(MARKUP);
  await expect.soft(root.getByTestId('tm-series-table')).toContainText(MARKUP, { timeout: 5_000 });
  await expect(root.locator('img')).toHaveCount(0);
  await expect(page.locator('img[src="x"], [onerror]')).toHaveCount(0);
}
