// UI tests of the dashboard in a real browser: `npm run test:ui`.
//
// widget.spec.ts drives JupyterLab (galata), started below from .venv on a free port with a
// temporary root holding copies of tests/ui/notebooks/; page.spec.ts starts `tm` itself. Headless
// Debian Chromium (/usr/bin/chromium, or $TM_UI_CHROMIUM): Playwright's own browsers are never
// downloaded (PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 in scripts/setup.sh).
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import baseConfig from '@jupyterlab/galata/lib/playwright-config.js';
import { defineConfig } from '@playwright/test';

const here = path.dirname(fileURLToPath(import.meta.url));

// Chosen once by the main process; workers load this file again and inherit its environment.
function freePort(): string {
  const probe =
    "const s = require('net').createServer();" +
    "s.listen(0, '127.0.0.1', () => { process.stdout.write(String(s.address().port)); s.close(); });";
  return execFileSync(process.execPath, ['-e', probe]).toString().trim();
}
process.env.TM_UI_JUPYTER_PORT ||= freePort();
const port = process.env.TM_UI_JUPYTER_PORT;

export default defineConfig({
  ...baseConfig,
  testDir: here,
  // scripts/readme_picture.sh runs only readme.picture.ts (the README's picture); the tests, the rest
  testMatch: process.env.TM_UI_README ? /readme\.picture\.ts$/ : /.*\.spec\.ts$/,
  outputDir: path.join(here, 'test-results'),
  reporter: [
    ['list'],
    ['html', { open: 'never', outputFolder: path.join(here, 'playwright-report') }]
  ],
  // One 2-core machine runs JupyterLab, a kernel training a model and Chromium: one test at a time.
  workers: 1,
  fullyParallel: false,
  retries: 0,
  timeout: 150_000,
  expect: { timeout: 15_000 },
  use: {
    ...baseConfig.use,
    baseURL: `http://127.0.0.1:${port}`,
    viewport: { width: 1280, height: 900 },
    actionTimeout: 15_000,
    trace: 'retain-on-failure',
    video: 'off',
    launchOptions: {
      executablePath: process.env.TM_UI_CHROMIUM || '/usr/bin/chromium',
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
        '--no-first-run',
        '--disable-quic'
      ]
    }
  },
  webServer: {
    command: `bash ${JSON.stringify(path.join(here, 'start_jupyter.sh'))}`,
    url: `http://127.0.0.1:${port}/lab`,
    timeout: 120_000,
    reuseExistingServer: false,
    stdout: 'ignore',
    stderr: 'pipe', // start_jupyter.sh's own messages; JupyterLab logs to tests/ui/jupyter.log
    // SIGTERM lets start_jupyter.sh stop JupyterLab (and its kernels) and remove its temporary root.
    gracefulShutdown: { signal: 'SIGTERM', timeout: 15_000 }
  }
});
