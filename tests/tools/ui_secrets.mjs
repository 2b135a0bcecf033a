// tests/tools/ui_secrets.mjs - the Secrets page of the web UI of a running `ferry serve`
// (started with --secret-key), in Debian's headless Chromium (playwright-core), for
// tests/e2e/ui_secrets.sh.
// usage: node ui_secrets.mjs BASE_URL TOKEN V1 V2 V3 OUT_DIR
// Stores secret "hk" = V1, replaces it with V2 (the row's "Replace value"), stores "tmp" =
// V3 and deletes it; after each step the page (its HTML and every input) must hold none of
// the values. Prints "stored hk", "replaced hk", "deleted tmp" and screenshot paths.
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const [base, token, v1, v2, v3, outDir] = process.argv.slice(2);
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
const shot = async (n) => { const p = join(outDir, `ui-secrets-${n}.png`); await page.screenshot({ path: p, fullPage: true }); shots.push(p); };
// No value anywhere in the page: its HTML, and what any input holds.
const noValues = async (step) => {
  const html = await page.content();
  const inputs = await page.$$eval('input, textarea', (els) => els.map((e) => e.value).join('\n'));
  for (const v of [v1, v2, v3]) if (html.includes(v) || inputs.includes(v)) fail(`${step}: a secret value is shown in the page`);
};
const save = async (name, value, msg) => {
  await page.fill('#sec-name', name);
  await page.fill('#sec-value', value);
  await page.click('#sec-form button[type=submit]');
  await page.waitForFunction((m) => document.querySelector('#sec-msg')?.textContent === m, msg, { timeout: 15000 });
};
try {
  await page.goto(`${base}/#token=${encodeURIComponent(token)}`);
  await page.click('#nav-secrets');
  await page.waitForSelector('#sec-form', { timeout: 15000 });
  await save('hk', v1, 'saved hk');
  await page.waitForSelector('tr[data-secret="hk"]', { timeout: 15000 });
  await noValues('after storing hk');
  console.log('stored hk');
  await page.click('tr[data-secret="hk"] button.sec-replace');
  if ((await page.inputValue('#sec-name')) !== 'hk') fail('"Replace value" did not fill the name');
  await page.fill('#sec-value', v2);
  await page.click('#sec-form button[type=submit]');
  await page.waitForFunction(() => document.querySelector('#sec-msg')?.textContent === 'saved hk', null, { timeout: 15000 });
  await noValues('after replacing hk');
  console.log('replaced hk');
  await save('tmp', v3, 'saved tmp');
  await page.waitForSelector('tr[data-secret="tmp"]', { timeout: 15000 });
  await noValues('after storing tmp');
  await shot('stored');
  await page.click('tr[data-secret="tmp"] button.sec-rm');
  await page.waitForSelector('tr[data-secret="tmp"]', { state: 'detached', timeout: 15000 });
  console.log('deleted tmp');
  await save('bad name', 'x', '').catch(() => {});
  await page.waitForFunction(() => /secret name|name/.test(document.querySelector('#sec-error')?.textContent ?? ''), null, { timeout: 15000 });
  await noValues('at the end');
  await shot('end');
  if (errors.length) fail(`page errors: ${errors.join('; ')}`);
  for (const p of shots) console.log(`screenshot: ${p}`);
} catch (e) {
  fail(e.stack || String(e));
} finally {
  await ctx.close();
  rmSync(userDataDir, { recursive: true, force: true });
}
