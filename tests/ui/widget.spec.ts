// The notebook widget, live, in JupyterLab: tests/ui/notebooks/widget.ipynb trains the tiny GPT of
// examples/train_gpt.py for ~30 s under `%%trainmeter --budget-tokens 2M --peak 1T` and emits one
// series named like markup; the test watches the widget while the cell runs.
import { expect, test } from '@jupyterlab/galata';

import {
  checkConventionSwitch,
  checkMarkupIsText,
  checkPanels,
  checkPrice,
  checkStepClimbs,
  isDashboardError,
  screenshot,
  softStep,
  watchPage
} from './dashboard';

const NOTEBOOK = 'widget.ipynb'; // copied into the server's temporary root by start_jupyter.sh
const NOTEBOOK_PATH = `/${NOTEBOOK}`; // from the root: galata's file browser starts in the test's tmpPath
const TRAIN_CELL = 2;

test('the widget renders, updates while the cell runs, and escapes series names', async ({ page }, testInfo) => {
  const seen = watchPage(page);

  expect(await page.notebook.openByPath(NOTEBOOK_PATH)).toBe(true);
  await page.notebook.activate(NOTEBOOK);
  await page.sidebar.close('left'); // the widget gets the window's width
  await page.notebook.runCell(0); // %load_ext trainmeter
  await page.notebook.runCell(1); // model, data, optimizer

  const prompt = (await page.notebook.getCellLocator(TRAIN_CELL))!.locator('.jp-InputPrompt');
  const running = async () => ((await prompt.textContent()) ?? '').includes('*');
  await page.notebook.runCell(TRAIN_CELL, { wait: false });
  await expect(prompt).toContainText('*');

  // The anywidget view: the output of the training cell that holds the dashboard.
  const output = (await page.notebook.getCellOutputLocator(TRAIN_CELL))!;
  const widget = output.locator('.jp-OutputArea-output').filter({ has: page.getByTestId('tm-step') });
  await expect(widget).toBeVisible({ timeout: 60_000 });
  await expect(widget.getByTestId('tm-state')).toHaveText(/running/i);

  await checkPanels(widget);
  const steps = await checkStepClimbs(widget, running);
  testInfo.annotations.push({ type: 'steps', description: `tm-step ${steps.first} -> ${steps.later} while [*]` });
  // The loss chart draws once a loss has been reported.
  await expect(widget.getByTestId('tm-loss-chart').locator('canvas').first()).toBeVisible();

  // Browser-side only (no kernel round trip), so they work while the cell holds the kernel.
  await softStep('convention switch', async () => {
    const r = await checkConventionSwitch(widget);
    testInfo.annotations.push({ type: 'mfu', description: `${r.from} ${r.mfuBefore} -> ${r.to} ${r.mfuAfter}` });
  });
  await softStep('price', () => checkPrice(widget));
  await checkMarkupIsText(widget, page);

  await screenshot(widget, 'notebook-widget-running', testInfo);

  // The cell ends on its own; the widget then shows the finished run.
  await page.notebook.waitForRun(TRAIN_CELL);
  await expect(widget.getByTestId('tm-state')).toHaveText(/finished/i);
  await expect(output).toContainText(/trained \d+ steps/);
  await screenshot(widget, 'notebook-widget-finished', testInfo);

  // Reopening the notebook while the kernel lives re-renders the view from the live widget
  // model: it shows the full final state (the store lives in anywidget's initialize()).
  const finalStep = (await widget.getByTestId('tm-step').textContent()) ?? '';
  expect(finalStep).toMatch(/\d/);
  await page.notebook.save();
  await page.notebook.close();
  await page.sidebar.open('left'); // galata opens a file through the file browser
  expect(await page.notebook.openByPath(NOTEBOOK_PATH)).toBe(true);
  await page.notebook.activate(NOTEBOOK);
  await page.sidebar.close('left');
  const reopened = (await page.notebook.getCellOutputLocator(TRAIN_CELL))!
    .locator('.jp-OutputArea-output')
    .filter({ has: page.getByTestId('tm-step') });
  await expect(reopened.getByTestId('tm-step')).toHaveText(finalStep, { timeout: 30_000 });
  await expect(reopened.getByTestId('tm-state')).toHaveText(/finished/i);
  await expect(reopened.getByTestId('tm-loss-chart').locator('canvas').first()).toBeVisible();

  expect(seen.dialogs, 'no dialog (alert) was opened').toEqual([]);
  const ours = seen.errors.filter(isDashboardError);
  expect(ours, 'no console error from the widget').toEqual([]);
  if (seen.errors.length) testInfo.annotations.push({ type: 'other console errors', description: seen.errors.join('\n') });
});
