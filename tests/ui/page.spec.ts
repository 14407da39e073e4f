// The `tm` dashboard page, live: `tm --port N --budget-tokens 2M --peak 1T` runs
// tests/ui/fixtures/train_markup.py (the tiny GPT for ~30 s, one series named like markup) from a
// temporary folder; the test reads the page's URL from tm's start line on stderr and watches it.
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

import { expect, test } from '@playwright/test';

import {
  checkConventionSwitch,
  checkMarkupIsText,
  checkPanels,
  checkPrice,
  checkStepClimbs,
  REPO,
  screenshot,
  softStep,
  watchPage
} from './dashboard';

const URL_RE = /http:\/\/127\.0\.0\.1:\d+\/t\/[^/\s]+\//;
const TRAIN_SECONDS = 30;

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as net.AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

/** Resolves with the first dashboard URL tm prints on stderr; rejects if tm exits first or is slow. */
function dashboardUrl(tm: ChildProcess, log: () => string, timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    let buf = '';
    const timer = setTimeout(
      () => reject(new Error(`tm printed no dashboard URL in ${timeoutMs / 1000} s; its output:\n${log()}`)),
      timeoutMs
    );
    tm.stderr!.on('data', (chunk: Buffer) => {
      buf += chunk.toString();
      const m = buf.match(URL_RE);
      if (m) {
        clearTimeout(timer);
        resolve(m[0]);
      }
    });
    tm.on('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`tm exited (${code ?? signal}) before printing a dashboard URL; its output:\n${log()}`));
    });
  });
}

/** A price no run figure will equal by chance (a figure that matched would be a false alarm). */
const PRICE = '913.77';

/**
 * Files under `dir` that hold the typed price: a JSON value equal to it, the digits as text, or a
 * key or text naming a price. The run log is JSON lines; anything else is checked as text.
 */
function priceInFiles(dir: string): string[] {
  const hits: string[] = [];
  const walk = (d: string) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.isFile()) {
        const text = fs.readFileSync(p, 'utf8');
        if (text.includes(PRICE) || /"price/i.test(text)) hits.push(p);
        for (const line of text.split('\n')) {
          try {
            JSON.parse(line, (k, v) => {
              if (v === Number(PRICE)) hits.push(`${p}: ${k}`);
              return v;
            });
          } catch {
            /* not JSON: checked as text above */
          }
        }
      }
    }
  };
  if (fs.existsSync(dir)) walk(dir);
  return hits;
}

/** SIGTERM tm's process group (tm forwards it to the script), then SIGKILL if it lingers. */
async function stop(tm: ChildProcess) {
  if (tm.exitCode !== null || tm.signalCode !== null) return;
  const exited = new Promise((resolve) => tm.once('exit', resolve));
  const kill = (sig: NodeJS.Signals) => {
    try {
      process.kill(-tm.pid!, sig);
    } catch {
      /* already gone */
    }
  };
  kill('SIGTERM');
  const timer = setTimeout(() => kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(timer);
}

test('the tm page renders, updates while the script runs, and escapes series names', async ({ page }, testInfo) => {
  const seen = watchPage(page);
  const cwd = fs.mkdtempSync(path.join(os.tmpdir(), 'trainmeter-ui-page-')); // its .trainmeter/ goes here
  const port = await freePort();
  const args = [
    '--port', String(port),
    '--budget-tokens', '2M',
    '--peak', '1T',
    path.join(REPO, 'tests', 'ui', 'fixtures', 'train_markup.py'),
    '--seconds', String(TRAIN_SECONDS)
  ];
  let output = '';
  const tm = spawn(path.join(REPO, '.venv', 'bin', 'tm'), args, {
    cwd,
    detached: true, // its own process group, so stop() reaches the training script too
    stdio: ['ignore', 'pipe', 'pipe']
  });
  tm.stdout!.on('data', (c: Buffer) => (output += c.toString()));
  tm.stderr!.on('data', (c: Buffer) => (output += c.toString()));
  try {
    const url = await dashboardUrl(tm, () => output, 60_000);
    expect(new URL(url).port, 'tm serves on the --port it was given').toBe(String(port));
    testInfo.annotations.push({ type: 'url', description: url });
    await page.goto(url);

    const root = page.locator('body');
    await expect(root.getByTestId('tm-step')).toBeVisible({ timeout: 30_000 });
    await expect(root.getByTestId('tm-state')).toHaveText(/running/i, { timeout: 30_000 });

    await checkPanels(root);
    const running = async () => tm.exitCode === null && tm.signalCode === null;
    const steps = await checkStepClimbs(root, running);
    testInfo.annotations.push({ type: 'steps', description: `tm-step ${steps.first} -> ${steps.later} while running` });
    // The loss chart draws once a loss has been reported.
    await expect(root.getByTestId('tm-loss-chart').locator('canvas').first()).toBeVisible();

    await softStep('convention switch', async () => {
      const r = await checkConventionSwitch(root);
      testInfo.annotations.push({ type: 'mfu', description: `${r.from} ${r.mfuBefore} -> ${r.to} ${r.mfuAfter}` });
    });
    await softStep('price', () => checkPrice(root, PRICE));
    await checkMarkupIsText(root, page);
    await screenshot(root, 'page-running', testInfo);

    // The price stays in the page: once tm has written everything, no file of the run holds it.
    await stop(tm);
    const runs = path.join(cwd, '.trainmeter', 'runs');
    const logs = fs.readdirSync(runs).filter((r) => fs.existsSync(path.join(runs, r, 'run.jsonl')));
    expect(logs.length, 'the run wrote its log').toBe(1);
    expect(priceInFiles(path.join(cwd, '.trainmeter')), 'the typed price reached no file').toEqual([]);

    expect(seen.dialogs, 'no dialog (alert) was opened').toEqual([]);
    // The whole page is the dashboard: every console error counts (a missing favicon aside).
    const ours = seen.errors.filter((e) => !/favicon/i.test(e));
    expect(ours, 'no console error on the page').toEqual([]);
    if (seen.errors.length) testInfo.annotations.push({ type: 'other console errors', description: seen.errors.join('\n') });
  } finally {
    await stop(tm);
    await testInfo.attach('tm output', { body: output, contentType: 'text/plain' });
    fs.rmSync(cwd, { recursive: true, force: true });
  }
});
