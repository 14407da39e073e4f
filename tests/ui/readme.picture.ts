// The README's picture (docs/img/widget.png): the quickstart notebook (notebooks/quickstart.ipynb)
// run in JupyterLab as a user runs it, cell by cell, and the widget of its training cell captured
// once the cell has finished. Not a test: scripts/readme_picture.sh runs it (TM_UI_README=1).
import path from 'node:path';

import { expect, test } from '@jupyterlab/galata';

import { REPO } from './dashboard';

const NOTEBOOK = 'quickstart.ipynb';
const OUT = path.join(REPO, 'docs', 'img', 'widget.png');

test('the quickstart notebook, as a user sees it', async ({ page }) => {
  test.setTimeout(600_000); // a CPU trains the quickstart's 60 steps in a few minutes here
  expect(await page.notebook.openByPath(`/${NOTEBOOK}`)).toBe(true);
  await page.notebook.activate(NOTEBOOK);
  await page.sidebar.close('left');
  await page.setViewportSize({ width: 1100, height: 900 });
  const cells = await page.notebook.getCellCount();
  let train = -1;
  for (let i = 0; i < cells; i++) {
    if ((await page.notebook.getCellType(i)) !== 'code') continue;
    const text = (await page.notebook.getCellTextInput(i)) ?? '';
    if (text.startsWith('%%trainmeter')) train = i;
    await page.notebook.runCell(i, { wait: true });
    if (train >= 0) break; // the picture is of the training cell's widget
  }
  expect(train, 'the quickstart has a %%trainmeter cell').toBeGreaterThanOrEqual(0);
  const output = (await page.notebook.getCellOutputLocator(train))!;
  const widget = output.locator('.jp-OutputArea-output').filter({ has: page.getByTestId('tm-step') });
  await expect(widget.getByTestId('tm-state')).toHaveText(/finished/i, { timeout: 60_000 });
  // the whole cell, its code above the widget and the summary line below it
  const cell = (await page.notebook.getCellLocator(train))!;
  const box = await cell.boundingBox();
  if (box) await page.setViewportSize({ width: 1100, height: Math.ceil(box.height) + 300 });
  await cell.scrollIntoViewIfNeeded();
  await page.evaluate(() => (document.activeElement as HTMLElement | null)?.blur?.());
  await page.waitForTimeout(500); // the charts redraw at the new size
  await cell.screenshot({ path: OUT, animations: 'disabled' });
});
