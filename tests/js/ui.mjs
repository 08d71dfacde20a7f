// The status page in a real browser: Debian's chromium (headless, quiet on the network, a fresh
// profile) driven by playwright-core, against a controller started by the Rust test.
// Usage: node ui.mjs BASE_URL TOKEN SHOTS_DIR
// Lines `EXIT <worker_id>` on stdout ask the Rust side to make that worker exit (it answers
// `ok` on stdin). Exits non-zero with a message on any mismatch.
import { chromium } from 'playwright-core';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

const [base, token, shots] = process.argv.slice(2);
const fail = (what) => {
  console.error(`ui check failed: ${what}`);
  process.exit(1);
};
const check = (cond, what) => cond || fail(what);
const answers = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const ask = async (line) => {
  console.log(line);
  const { value } = await answers.next();
  check(value === 'ok', `the test side answered ${value}`);
};
const api = async (data) => {
  const r = await fetch(`${base}/a2a`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${token}` },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'SendMessage',
      params: { message: { messageId: `m${Math.random()}`, role: 'ROLE_USER', parts: [{ data }] } } }),
  });
  return (await r.json()).result.task.artifacts[0].parts[0].data;
};

// A fresh profile each run (playwright passes it as --user-data-dir).
const context = await chromium.launchPersistentContext(mkdtempSync(join(tmpdir(), 'a2a-ui-')), {
  executablePath: '/usr/bin/chromium',
  headless: true,
  viewport: { width: 1280, height: 800 },
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
    '--disable-sync', '--no-first-run'],
});
const page = context.pages()[0] || (await context.newPage());
const problems = [];
page.on('console', (m) => {
  // A failed load is judged from its response below; everything else is a problem.
  if (/^Failed to load resource/.test(m.text())) return;
  if (m.type() === 'error' || /Content Security Policy/i.test(m.text())) problems.push(m.text());
});
// The only failing answers allowed: the wrong token's one 401, and the favicon nobody serves.
let refused = 0;
page.on('response', (r) => {
  const path = new URL(r.url()).pathname;
  if (r.status() < 400) return;
  if (r.status() === 401 && path === '/a2a' && refused++ === 0) return;
  if (r.status() === 404 && path === '/favicon.ico') return;
  problems.push(`${r.status()} for ${path}`);
});
page.on('pageerror', (e) => problems.push(String(e)));
const dialogs = [];
page.on('dialog', async (d) => {
  dialogs.push(d.message());
  await d.accept();
});

const response = await page.goto(`${base}/ui`);
const csp = response.headers()['content-security-policy'] || '';
check(csp.includes("default-src 'none'") && csp.includes("frame-ancestors 'none'"), `CSP: ${csp}`);

// A wrong token says so and asks again.
await page.locator('#token').fill('wrong-token-0000000000');
await page.locator('#login-form button').click();
await page.locator('#login-error').filter({ hasText: 'refused' }).waitFor();
check(await page.locator('#login').isVisible(), 'the sign-in stays');

// The keyboard alone from here on where a person types: the field found by its label, the
// token typed, Enter to sign in.
const outline = async () => page.evaluate(() => {
  const s = getComputedStyle(document.activeElement);
  return `${document.activeElement.tagName} ${s.outlineStyle} ${s.outlineWidth}`;
});
await page.getByLabel("The controller's bearer token").focus();
await page.keyboard.type(token);
await page.keyboard.press('Enter');
await page.locator('#empty').waitFor();
await page.locator('#connection').filter({ hasText: 'live' }).waitFor();
check((await page.locator('#connection').getAttribute('aria-live')) === 'polite', 'the connection line is aria-live');
const headers = await page.locator('#workers thead').ariaSnapshot();
for (const h of ['Worker', 'Task', 'State', 'Expires', 'Actions']) {
  check(headers.includes(`columnheader "${h}"`), `a column header named ${h}: ${headers}`);
}

// Create from the page with the keyboard (Tab, and a visible focus on the button): the token
// shown once.
await page.getByLabel('Task').focus();
await page.keyboard.type('from-page');
await page.keyboard.press('Tab');
check((await outline()).startsWith('INPUT solid'), `focus visible on the TTL field: ${await outline()}`);
await page.keyboard.press('Tab');
check((await outline()) === 'BUTTON solid 3px', `focus visible on Create: ${await outline()}`);
await page.keyboard.press('Enter');
await page.locator('#token-once').waitFor();
const shown = await page.locator('#token-value').textContent();
check(/^[0-9a-f]{64}$/.test(shown), `the token shown once: ${shown}`);
await page.locator('tr', { hasText: 'from-page' }).waitFor();

// Created elsewhere (as the CLI would): it appears live.
const other = await api({ operation: 'create', task: 'from-cli', metadata: { team: 'ops' } });
await page.locator('tr', { hasText: 'from-cli' }).filter({ hasText: 'team=ops' }).waitFor();
// It exits: the page shows it live.
await ask(`EXIT ${other.worker.worker_id}`);
await page.locator('tr', { hasText: 'from-cli' }).locator('.state-exited').waitFor();

// A hostile task name is text, never HTML.
const xss = '<img src=x onerror=alert(1)>';
await api({ operation: 'create', task: xss });
await page.locator('tr', { hasText: xss }).waitFor();
check((await page.locator('#workers img').count()) === 0, 'no element made from a task name');

// Logs, then Stop with its confirmation naming the task.
await page.locator('tr', { hasText: 'from-page' }).getByRole('button', { name: 'Logs of from-page' }).click();
await page.locator('#logs').waitFor();
check((await page.locator('#logs-title').textContent()).includes('from-page'), 'the logs panel names the task');
// Stop by the keyboard: the button reached and pressed with Enter, the confirmation accepted.
await page.locator('tr', { hasText: 'from-page' }).getByRole('button', { name: 'Stop from-page' }).focus();
await page.keyboard.press('Enter');
await page.locator('tr', { hasText: 'from-page' }).waitFor({ state: 'detached' });
check(dialogs.length === 1 && dialogs[0].includes('from-page'), `the confirmation: ${dialogs}`);

// The controller goes away: the page says so; it comes back: the page is live again.
await ask('STOP');
await page.locator('#connection').filter({ hasText: /reconnecting|unreachable/ }).waitFor({ timeout: 20000 });
await ask('START');
await page.locator('#connection').filter({ hasText: /^live/ }).waitFor({ timeout: 20000 });
await page.locator('tr', { hasText: 'from-cli' }).waitFor();

await page.screenshot({ path: join(shots, 'ui-1280x800.png'), fullPage: true });
await page.setViewportSize({ width: 390, height: 844 });
await page.screenshot({ path: join(shots, 'ui-390x844.png'), fullPage: true });
// On a phone the page does not scroll sideways (the table scrolls in its own box).
const wide = await page.evaluate(() => document.documentElement.scrollWidth);
check(wide <= 390, `the narrow page is ${wide} px wide`);

// No token anywhere it must not be.
const stored = await page.evaluate(() => JSON.stringify({ local: { ...localStorage }, url: location.href }));
check(!stored.includes(token) && !stored.includes(shown), `stored: ${stored}`);
check((await context.cookies()).length === 0, 'no cookies');
check(problems.length === 0, `console errors or CSP violations: ${problems.join(' | ')}`);
await context.close();
console.log('ui: ok');
process.exit(0);
