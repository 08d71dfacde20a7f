// The status page in a real browser: Debian's chromium (headless, quiet on the network, a fresh
// profile) driven by playwright-core, against a controller started by the Rust test.
// Usage: node ui.mjs BASE_URL TOKEN SHOTS_DIR
// Lines `EXIT <worker_id>` on stdout ask the Rust side to make that worker exit, `SCOPED
// <task>` to add a worker another caller made in scope team-b, `STOP` / `START` to stop and
// start the controller (it answers `ok` on stdin). Exits non-zero with a message on any mismatch.
import { chromium } from 'playwright-core';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

const [base, token, shots, pools] = process.argv.slice(2);
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
  // A renew's prompt is answered with a TTL; a confirmation is accepted.
  await (d.type() === 'prompt' ? d.accept('2h') : d.accept());
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
for (const h of ['Worker', 'Task', 'Template', 'State', 'Expires', 'Actions']) {
  check(headers.includes(`columnheader "${h}"`), `a column header named ${h}: ${headers}`);
}

// The header says the warm pool (members ready of those kept), asked again every 5 s.
if (pools) {
  await page.locator('#pools').filter({ hasText: pools }).waitFor({ timeout: 15000 });
} else {
  check((await page.locator('#pools').textContent()) === '', 'no warm pool in the header');
}

// Create from the page with the keyboard (Tab, and a visible focus on the button): the token
// shown once.
// The templates this caller may use are offered (default always); the last one is chosen.
const options = await page.locator('#template option').allTextContents();
check(options.includes('default'), `the templates offered: ${options}`);
const chosen = options[options.length - 1];
await page.getByLabel('Task').focus();
await page.keyboard.type('from-page');
await page.keyboard.press('Tab');
check((await outline()).startsWith('SELECT solid'), `focus visible on the template choice: ${await outline()}`);
await page.locator('#template').selectOption(chosen);
await page.keyboard.press('Tab');
check((await outline()).startsWith('INPUT solid'), `focus visible on the TTL field: ${await outline()}`);
await page.keyboard.press('Tab');
check((await outline()) === 'BUTTON solid 3px', `focus visible on Create: ${await outline()}`);
await page.keyboard.press('Enter');
await page.locator('#token-once').waitFor();
const shown = await page.locator('#token-value').textContent();
check(/^[0-9a-f]{64}$/.test(shown), `the token shown once: ${shown}`);
await page.locator('tr', { hasText: 'from-page' }).waitFor();
check((await page.locator('tr', { hasText: 'from-page' }).locator('td', { hasText: new RegExp(`^${chosen}$`) }).count()) === 1,
  `the row shows its template ${chosen}`);

// Created elsewhere (as the CLI would): it appears live.
const other = await api({ operation: 'create', task: 'from-cli', metadata: { team: 'ops' } });
await page.locator('tr', { hasText: 'from-cli' }).filter({ hasText: 'team=ops' }).waitFor();
// It exits: the page shows it live.
await ask(`EXIT ${other.worker.worker_id}`);
await page.locator('tr', { hasText: 'from-cli' }).locator('.state-exited').waitFor();
// The event log, newest first, with the reason; the header counts workers per state.
await page.locator('#event-log li').first().filter({ hasText: 'changed' }).filter({ hasText: /exited with code 1(37)?$/ }).waitFor();
check((await page.locator('#event-log li', { hasText: 'added' }).filter({ hasText: 'from-cli' }).count()) === 1, 'the added event is logged');
check((await page.locator('#event-log').getAttribute('role')) === 'log', 'the event log is a live region (role log)');
const counts = await page.locator('#counts').textContent();
check(/^2 workers: 1 running · 1 exited$/.test(counts), `the header's counts: ${counts}`);
// One scope: no scope column. A worker of another scope (an admin sees every scope): the
// column appears, naming it.
check(!(await page.locator('#workers th.col-scope').isVisible()), 'no scope column with one scope');
await ask('SCOPED other-team');
await page.locator('tr', { hasText: 'other-team' }).locator('td.col-scope', { hasText: 'team-b' }).waitFor();
check(await page.locator('#workers th.col-scope').isVisible(), 'the scope column with two scopes');

// A hostile task name is text, never HTML.
const xss = '<img src=x onerror=alert(1)>';
await api({ operation: 'create', task: xss });
await page.locator('tr', { hasText: xss }).waitFor();
check((await page.locator('#workers img').count()) === 0, 'no element made from a task name');

// Logs, then Stop with its confirmation naming the task.
await page.locator('tr', { hasText: 'from-page' }).getByRole('button', { name: 'Logs of from-page' }).click();
await page.locator('#logs').waitFor();
check((await page.locator('#logs-title').textContent()).includes('from-page'), 'the logs panel names the task');
// Suspend: the row says suspended and offers Resume (not Renew); Resume: running again.
const row = () => page.locator('tr', { hasText: 'from-page' });
await row().getByRole('button', { name: 'Suspend from-page' }).click();
await row().locator('.state-suspended').waitFor();
check((await row().getByRole('button', { name: 'Renew from-page' }).count()) === 0, 'no Renew while suspended');
await row().getByRole('button', { name: 'Resume from-page' }).click();
await row().locator('.state-running').waitFor();
// Renew: the prompt asks how long; the expiry shown is about two hours away.
await row().getByRole('button', { name: 'Renew from-page' }).click();
await row().locator('td', { hasText: /^in (1 h 59|2 h 0) min$/ }).first().waitFor();
check(dialogs.length === 1 && dialogs[0].includes('Renew') && dialogs[0].includes('from-page'), `the renew prompt: ${dialogs}`);
dialogs.length = 0;
// Stop by the keyboard: the button reached and pressed with Enter, the confirmation accepted.
// The rows are rebuilt every second while a countdown runs (the renewed worker has one): the
// focus stays on the button through the next rebuild.
await page.locator('tr', { hasText: 'from-page' }).getByRole('button', { name: 'Stop from-page' }).focus();
await page.evaluate(() => new Promise((done) => {
  const body = document.getElementById('workers').tBodies[0];
  new MutationObserver((_, seen) => { seen.disconnect(); done(); }).observe(body, { childList: true });
}));
check(await page.evaluate(() => document.activeElement && document.activeElement.getAttribute('aria-label')) === 'Stop from-page',
  'the focus stays on the Stop button through a rebuild of the rows');
await page.keyboard.press('Enter');
await page.locator('tr', { hasText: 'from-page' }).waitFor({ state: 'detached' });
check(dialogs.length === 1 && dialogs[0].includes('from-page'), `the confirmation: ${dialogs}`);

// The controller goes away: the page says so; it comes back: the page is live again.
await ask('STOP');
await page.locator('#connection').filter({ hasText: /reconnecting|unreachable/ }).waitFor({ timeout: 20000 });
await ask('START');
await page.locator('#connection').filter({ hasText: /^live/ }).waitFor({ timeout: 20000 });
await page.locator('tr', { hasText: 'from-cli' }).waitFor();

// Wide, the workers are a table.
check((await page.locator('#workers tbody tr').first().evaluate((tr) => getComputedStyle(tr).display)) === 'table-row', 'a table at 1280 px');
const box = await page.locator('.scroll').evaluate((d) => [d.scrollWidth, d.clientWidth]);
check(box[0] <= box[1], `the table fits 1280 px without scrolling: ${box}`);
await page.screenshot({ path: join(shots, 'ui-1280x800.png'), fullPage: true });
// On a phone every worker is a card: its task, state, reason, age and its buttons are on
// screen without scrolling sideways, and the page does not scroll sideways at all.
await page.setViewportSize({ width: 390, height: 844 });
check((await page.locator('#workers tbody tr').first().evaluate((tr) => getComputedStyle(tr).display)) === 'block', 'a card at 390 px');
const wide = await page.evaluate(() => document.documentElement.scrollWidth);
check(wide <= 390, `the narrow page is ${wide} px wide`);
const offScreen = await page.evaluate(() => {
  const out = [];
  for (const tr of document.querySelectorAll('#workers tbody tr')) {
    const task = tr.querySelector('td.task').textContent;
    const wanted = [...tr.querySelectorAll('td')].filter((td) => ['Task', 'State', 'Reason', 'Created'].includes(td.dataset.label) && td.textContent)
      .concat([...tr.querySelectorAll('button')]);
    for (const el of wanted) {
      const r = el.getBoundingClientRect();
      if (r.width === 0 || r.left < 0 || r.right > 390) out.push(`${task}: ${el.dataset.label || el.textContent} at ${r.left}-${r.right}`);
    }
    // Logs and Stop; a running worker Renew and Suspend too, a suspended one Resume.
    const state = tr.querySelector('.state').textContent;
    const buttons = { running: 4, starting: 4, suspended: 3 }[state] || 2;
    if (tr.querySelectorAll('button').length !== buttons) out.push(`${task}: ${tr.querySelectorAll('button').length} buttons (${state})`);
  }
  return out;
});
check(offScreen.length === 0, `off screen on a phone: ${offScreen.join('; ')}`);
const reason = page.locator('tr', { hasText: 'from-cli' }).locator('td[data-label="Reason"]');
// (The test double's exit is code 1; the real engine's kill, code 137.)
check(/^exited with code 1(37)?$/.test(await reason.textContent()) && (await reason.isVisible()), `the reason on the card: ${await reason.textContent()}`);
// Still the keyboard: a card's Logs button reached and pressed with Enter.
await page.locator('tr', { hasText: 'from-cli' }).getByRole('button', { name: 'Logs of from-cli' }).focus();
check((await outline()) === 'BUTTON solid 3px', `focus visible on a card's button: ${await outline()}`);
await page.keyboard.press('Enter');
await page.locator('#logs-title', { hasText: 'from-cli' }).waitFor();
await page.screenshot({ path: join(shots, 'ui-390x844.png'), fullPage: true });
// Dark, as the system asks: a dark page, its text light.
await page.emulateMedia({ colorScheme: 'dark' });
const [bg, fg] = await page.evaluate(() => [getComputedStyle(document.documentElement).backgroundColor, getComputedStyle(document.body).color]);
const lum = (c) => { const [r, g, b] = c.match(/\d+/g).map(Number); return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255; };
check(lum(bg) < 0.2 && lum(fg) > 0.7, `dark: background ${bg}, text ${fg}`);
await page.screenshot({ path: join(shots, 'ui-390x844-dark.png'), fullPage: true });
await page.setViewportSize({ width: 1280, height: 800 });
await page.screenshot({ path: join(shots, 'ui-1280x800-dark.png'), fullPage: true });

// No token anywhere it must not be.
const stored = await page.evaluate(() => JSON.stringify({ local: { ...localStorage }, url: location.href }));
check(!stored.includes(token) && !stored.includes(shown), `stored: ${stored}`);
check((await context.cookies()).length === 0, 'no cookies');
check(problems.length === 0, `console errors or CSP violations: ${problems.join(' | ')}`);
await context.close();
console.log('ui: ok');
process.exit(0);
