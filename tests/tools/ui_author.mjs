// tests/tools/ui_author.mjs - authoring in the web UI of a running `ferry serve`, in Debian's
// headless Chromium (playwright-core), for tests/e2e/ui_author.sh.
// usage: node ui_author.mjs BASE_URL TOKEN NAME SINK_PATH OUT_DIR
// Creates pipeline NAME in the editor: first with an unknown key on line 9 (the server's
// error must be shown and line 9 marked in the gutter), then fixed; on the pipeline page adds
// a schedule, switches it off, removes it; starts a run and waits until the run page shows
// it completed with its attempt history. Prints "created", "schedule ID" lines, "run ID
// completed" and screenshot paths.
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const [base, token, name, sinkPath, outDir] = process.argv.slice(2);
const fail = (msg) => { console.error(`FAIL: ${msg}`); process.exit(1); };
const userDataDir = mkdtempSync(join(tmpdir(), 'ferry-chromium-'));
const ctx = await chromium.launchPersistentContext(userDataDir, {
  executablePath: '/usr/bin/chromium', headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update'],
  viewport: { width: 1200, height: 900 },
});
const page = ctx.pages()[0] || await ctx.newPage();
const errors = [];
page.on('pageerror', (e) => errors.push(String(e)));
const shots = [];
const shot = async (n) => { const p = join(outDir, `ui-author-${n}.png`); await page.screenshot({ path: p, fullPage: true }); shots.push(p); };
try {
  await page.goto(`${base}/#token=${encodeURIComponent(token)}`);
  await page.locator('#new-pipeline').click();
  await page.waitForSelector('#e-text', { timeout: 15000 });
  const yaml = (extra) => ['version: 1', `name: ${name}`, 'source:', '  type: sample', '  rows: 20000',
    '  seed: 7', '  resources:', '    - {table: orders, mode: full}', extra, 'sink:', '  type: sqlite',
    `  path: ${sinkPath}`, '  write: append', 'batch: {rows: 5000}', ''].join('\n');
  await page.fill('#e-text', yaml('retrys: 2'));
  await page.click('#e-save');
  await page.waitForSelector('#edit-error', { timeout: 15000 });
  const msg = await page.locator('#edit-error').textContent();
  if (!/retrys.*did you mean retries/.test(msg)) fail(`the error does not name the key: ${msg}`);
  if ((await page.locator('#edit-error').getAttribute('data-line')) !== '9') fail(`error line: ${msg}`);
  if ((await page.locator('#e-gutter .error-line').textContent()) !== '9') fail('line 9 not marked in the gutter');
  await shot('error');
  await page.fill('#e-text', yaml('  # fixed'));
  await page.click('#e-save');
  await page.waitForURL(new RegExp(`#/pipelines/${name}$`), { timeout: 15000 });
  console.log('created');
  await page.fill('#s-cron', '0 3 * * *');
  await page.fill('#s-tz', 'Europe/Paris');
  await page.click('#s-add button[type=submit]');
  const srow = page.locator('tr[data-schedule]');
  await srow.first().waitFor({ timeout: 15000 });
  const sid = await srow.first().getAttribute('data-schedule');
  console.log(`schedule ${sid} added`);
  await page.locator(`tr[data-schedule="${sid}"] button.s-toggle`).click();
  await page.waitForSelector(`tr[data-schedule="${sid}"] button.s-toggle[data-enabled="false"]`, { timeout: 15000 });
  console.log(`schedule ${sid} off`);
  await shot('schedule');
  await page.locator(`tr[data-schedule="${sid}"] button.s-rm`).click();
  await page.waitForSelector(`tr[data-schedule="${sid}"]`, { state: 'detached', timeout: 15000 });
  console.log(`schedule ${sid} removed`);
  await page.click('#start');
  await page.waitForURL(/#\/runs\/\d+$/, { timeout: 15000 });
  const runId = page.url().match(/#\/runs\/(\d+)/)[1];
  await page.waitForSelector('#r-state .badge[data-state="completed"]', { timeout: 60000 });
  await page.waitForSelector('tr[data-attempt="1"] .badge[data-state="completed"]', { timeout: 15000 });
  await page.waitForFunction(() => /worker pid \d+: run \d+/.test(document.querySelector('#r-log')?.textContent ?? ''), null, { timeout: 15000 });
  await shot('run');
  console.log(`run ${runId} completed`);
  if (errors.length) fail(`page errors: ${errors.join('; ')}`);
  for (const p of shots) console.log(`screenshot: ${p}`);
} catch (e) {
  fail(e.stack || String(e));
} finally {
  await ctx.close();
  rmSync(userDataDir, { recursive: true, force: true });
}
