// tests/tools/ui_check.mjs - drives the web UI of a running `ferry serve` in Debian's
// headless Chromium (playwright-core, no downloaded browser) for tests/e2e/ui.sh.
// usage: node ui_check.mjs BASE_URL TOKEN PIPELINE OUT_DIR [FAILING_PIPELINE] [PAUSE_PIPELINE]
// FAILING_PIPELINE: a run of it fails; its error must show. PAUSE_PIPELINE: started from its
// pipeline page, paused and resumed with the run page's buttons, until it completes.
// Loads the UI with the token, starts a run of PIPELINE from the pipelines page, watches
// the run page until the run completes, checks what the page showed on the way (rows
// growing while running, the rows/s chart, verified batches, checkpoints, the event feed),
// takes screenshots (wide and narrow) into OUT_DIR and prints their paths.
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const [base, token, pipeline, outDir, failing, pausing] = process.argv.slice(2);
const fail = (msg) => { console.error(`FAIL: ${msg}`); process.exit(1); };

const userDataDir = mkdtempSync(join(tmpdir(), 'ferry-chromium-'));
const ctx = await chromium.launchPersistentContext(userDataDir, {
  executablePath: '/usr/bin/chromium',
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run',
    '--disable-background-networking', '--disable-component-update'],
  viewport: { width: 1200, height: 900 },
});
const page = ctx.pages()[0] || await ctx.newPage();
const consoleErrors = [];
page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(m.text()); });
page.on('pageerror', (e) => consoleErrors.push(String(e)));
try {
  // Without a token: the login form.
  await page.goto(`${base}/`);
  await page.waitForSelector('#login:not([hidden])', { timeout: 15000 });
  await page.fill('#token', 'wrong');
  await page.click('#login-form button');
  await page.waitForSelector('#login-error:not([hidden])', { timeout: 15000 });

  await page.goto(`${base}/#token=${encodeURIComponent(token)}`);
  const row = page.locator(`tr[data-pipeline="${pipeline}"]`);
  await row.waitFor({ timeout: 15000 });
  if (page.url().includes('token=')) fail('the token stayed in the address bar');
  await row.locator('button.start').click();
  await page.waitForURL(/#\/runs\/\d+$/, { timeout: 15000 });
  const runId = page.url().match(/#\/runs\/(\d+)/)[1];

  // While it runs: the rows counter must grow at least twice, the chart must get points.
  const seen = new Set();
  let sawRunning = false, midShot = null;
  const deadline = Date.now() + 150000;
  for (;;) {
    if (Date.now() > deadline) fail('the run did not complete in the UI in time');
    const state = await page.locator('#r-state .badge').getAttribute('data-state').catch(() => null);
    const rows = await page.locator('#stat-rows b').textContent().catch(() => null);
    if (state === 'running') {
      sawRunning = true;
      if (rows && rows !== '0') seen.add(rows);
      if (!midShot && seen.size >= 2) {
        midShot = join(outDir, `ui-run-${runId}-running.png`);
        await page.screenshot({ path: midShot, fullPage: true });
      }
    }
    if (state === 'completed') break;
    if (state === 'failed' || state === 'canceled') fail(`the run ended ${state}: ${await page.locator('#r-error').textContent()}`);
    await page.waitForTimeout(150);
  }
  if (!sawRunning || seen.size < 2) fail(`no live progress seen while running (rows values: ${[...seen].join(', ')})`);
  // The final state, as the page shows it.
  await page.waitForFunction(() => document.querySelector('#r-chart')?.dataset.points > 0, null, { timeout: 10000 });
  await page.waitForSelector('tr[data-resource] .badge[data-state="completed"]', { timeout: 10000 });
  // The state may turn completed (a refresh) a moment before the stream delivers the event.
  await page.waitForFunction(() => document.querySelector('#feed')?.textContent.includes('run.completed'),
    null, { timeout: 10000 }).catch(() => {});
  const feed = await page.locator('#feed').textContent();
  if (!feed.includes('run.completed') || !feed.includes('batch.written')) fail(`event feed: ${feed.slice(0, 300)}`);
  // The attempt history (GET /v1/runs/{id} attempts): one attempt, completed.
  await page.waitForSelector('tr[data-attempt="1"] .badge[data-state="completed"]', { timeout: 10000 });
  const cps = await page.locator('#r-checkpoints').textContent();
  if (!cps.includes('"key"')) fail(`checkpoints not shown: ${cps}`);
  const verified = await page.locator('tr[data-resource] td.num').nth(1).textContent();
  if (verified.trim() === '0') fail('no verified batches shown');
  if (!(await page.locator('#b-pause').isDisabled()) || !(await page.locator('#b-cancel').isDisabled()))
    fail('pause/cancel enabled on a completed run');
  const done = join(outDir, `ui-run-${runId}-completed.png`);
  await page.screenshot({ path: done, fullPage: true });

  // Narrow window: nothing wider than the viewport.
  await page.setViewportSize({ width: 380, height: 800 });
  await page.waitForTimeout(300);
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  if (overflow > 1) fail(`the run page is ${overflow}px wider than a 380px window`);
  const narrow = join(outDir, `ui-run-${runId}-narrow.png`);
  await page.screenshot({ path: narrow, fullPage: true });

  // A run that fails: its error is shown on the run page.
  if (failing) {
    await page.setViewportSize({ width: 1200, height: 900 });
    await page.goto(`${base}/#/pipelines`);
    await page.locator(`tr[data-pipeline="${failing}"] button.start`).click();
    await page.waitForURL(/#\/runs\/\d+$/, { timeout: 15000 });
    const fid = page.url().match(/#\/runs\/(\d+)/)[1];
    await page.waitForSelector('#r-state .badge[data-state="failed"]', { timeout: 60000 });
    const msg = (await page.locator('#run-error').textContent()).trim();
    if (!msg) fail('a failed run shows no error');
    const shot = join(outDir, `ui-run-${fid}-failed.png`);
    await page.screenshot({ path: shot, fullPage: true });
    if (!(await page.locator('#b-resume').isEnabled())) fail('resume disabled on a failed run');
    console.log(`failed run ${fid} shows: ${msg}`);
    console.log(`screenshot: ${shot}`);
  }

  // Pause and resume with the buttons, from a run started on the pipeline's own page.
  if (pausing) {
    await page.setViewportSize({ width: 1200, height: 900 });
    await page.goto(`${base}/#/pipelines/${encodeURIComponent(pausing)}`);
    await page.locator('#start').click();
    await page.waitForURL(/#\/runs\/\d+$/, { timeout: 15000 });
    const pid = page.url().match(/#\/runs\/(\d+)/)[1];
    await page.waitForFunction(() => {
      const s = document.querySelector('#r-state .badge')?.dataset.state;
      const rows = document.querySelector('#stat-rows b')?.textContent;
      return s === 'running' && rows && rows !== '0';
    }, null, { timeout: 60000 });
    await page.locator('#b-pause').click();
    await page.waitForSelector('#r-state .badge[data-state="paused"]', { timeout: 60000 });
    const pausedRows = await page.locator('#stat-rows b').textContent();
    if (!(await page.locator('#b-resume').isEnabled())) fail('resume disabled on a paused run');
    await page.waitForFunction(() => document.querySelector('#feed')?.textContent.includes('run.paused'), null, { timeout: 10000 });
    await page.locator('#b-resume').click();
    await page.waitForSelector('#r-state .badge[data-state="completed"]', { timeout: 120000 });
    console.log(`run ${pid} paused at ${pausedRows} rows with the button, resumed, completed`);
  }

  // The runs list with a state filter.
  await page.goto(`${base}/#/runs?state=completed`);
  await page.locator(`tr[data-run="${runId}"]`).waitFor({ timeout: 10000 });
  if (consoleErrors.filter((e) => !e.includes('401')).length) fail(`console errors: ${consoleErrors.join(' | ')}`);
  console.log(`run ${runId} completed in the UI; rows seen live: ${[...seen].join(' -> ')}`);
  for (const p of [midShot, done, narrow]) if (p) console.log(`screenshot: ${p}`);
} finally {
  await ctx.close();
  rmSync(userDataDir, { recursive: true, force: true }); // the browser profile
}
