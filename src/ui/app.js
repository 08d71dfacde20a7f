// The status page: the controller's public A2A JSON-RPC API only (fetch with the bearer token;
// the watch stream read from a ReadableStream, since EventSource cannot send headers). Every
// text from the controller is inserted as text, never as HTML. The token lives in memory, or in
// sessionStorage when asked; never in the URL, localStorage, a cookie or a log.
'use strict';

const $ = (id) => document.getElementById(id);
let token = sessionStorage.getItem('a2a-token') || '';
const workers = new Map();
// The watch's last events, newest first.
const events = [];
const MAX_EVENTS = 50;
const STATES = ['running', 'starting', 'suspended', 'exited', 'stopping', 'unknown'];
let lastHeard = 0;
let watching = null;

function text(el, value) { el.textContent = value == null ? '' : String(value); }

async function rpc(method, params) {
  const r = await fetch('/a2a', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${token}` },
    body: JSON.stringify({ jsonrpc: '2.0', id: String(Date.now()), method, params }),
  });
  if (r.status === 401) throw Object.assign(new Error('the token was refused'), { unauthorized: true });
  const body = await r.json();
  if (body.error) throw new Error(`${body.error.code}: ${body.error.message}`);
  lastHeard = Date.now();
  return body.result;
}

function message(data) {
  return { message: { messageId: `ui-${Date.now()}-${Math.random()}`, role: 'ROLE_USER', parts: [{ data }] } };
}

// One control operation; its reply data, or an Error carrying the contract's one line.
async function control(data) {
  const task = (await rpc('SendMessage', message(data))).task;
  if (task.status.state === 'TASK_STATE_COMPLETED') return task.artifacts[0].parts[0].data;
  const e = task.status.message && task.status.message.parts[1] && task.status.message.parts[1].data.error;
  throw new Error(e ? `${e.code}: ${e.message}` : task.status.state);
}

function ago(iso) {
  const t = Date.parse(iso);
  if (!t) return '';
  const s = Math.max(0, Math.round((Date.now() - t) / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  return `${Math.round(s / 3600)} h ago`;
}

function countdown(iso) {
  const t = Date.parse(iso);
  if (!t) return ['', false];
  const s = Math.round((t - Date.now()) / 1000);
  if (s <= 0) return ['now', true];
  const m = Math.floor(s / 60);
  return [m >= 60 ? `in ${Math.floor(m / 60)} h ${m % 60} min` : `in ${m} min ${s % 60} s`, s < 60];
}

// The header's count of workers per state.
function renderCounts(list) {
  const counts = STATES.map((s) => [s, list.filter((w) => w.state === s).length]).filter(([, n]) => n > 0);
  const n = list.length;
  text($('counts'), `${n} worker${n === 1 ? '' : 's'}${counts.length ? ': ' : ''}${counts.map(([s, c]) => `${c} ${s}`).join(' · ')}`);
}

function render() {
  const body = $('workers').tBodies[0];
  // The rows are rebuilt (every second while a countdown runs): a button the keyboard is on is
  // found again by its label and keeps the focus, or a keyboard user would lose their place.
  const focused = body.contains(document.activeElement) ? document.activeElement.getAttribute('aria-label') : null;
  body.replaceChildren();
  const list = [...workers.values()].sort((a, b) => (a.created_at + a.worker_id).localeCompare(b.created_at + b.worker_id));
  $('empty').hidden = list.length > 0;
  renderCounts(list);
  // A caller that sees one scope needs no scope column; an admin over several does.
  const scoped = new Set(list.map((w) => w.scope)).size > 1;
  $('workers').classList.toggle('scoped', scoped);
  for (const w of list) {
    const tr = document.createElement('tr');
    // Each cell says what it is: below the breakpoint a row is a card, one labelled line a cell.
    const cell = (label, value, cls) => {
      const td = document.createElement('td');
      if (cls) td.className = cls;
      td.dataset.label = label;
      text(td, value);
      tr.append(td);
      return td;
    };
    cell('Worker', w.worker_id, 'mono');
    cell('Task', w.task, 'task');
    cell('Scope', w.scope, 'col-scope');
    // One backend per controller: the header names it; the column says the template.
    cell('Template', w.template, 'minor');
    const state = document.createElement('span');
    state.className = `state state-${w.state}`;
    text(state, w.state);
    const st = cell('State', '');
    st.append(state);
    cell('Reason', w.reason, w.reason ? '' : 'blank');
    const created = cell('Created', ago(w.created_at));
    created.title = w.created_at;
    const [left, soon] = countdown(w.expires_at);
    const exp = cell('Expires', left, `${soon ? 'expiring' : ''} ${left ? '' : 'blank'}`.trim());
    exp.title = w.expires_at;
    const where = w.a2a_url || (w.pane_id ? `pane ${w.pane_id}` : '');
    cell('Where', where, `mono minor ${where ? '' : 'blank'}`.trim());
    const meta = Object.entries(w.metadata || {}).map(([k, v]) => `${k}=${v}`).join(', ');
    cell('Metadata', meta, meta ? '' : 'blank');
    const actions = document.createElement('td');
    actions.className = 'actions';
    const logs = document.createElement('button');
    logs.type = 'button';
    text(logs, 'Logs');
    logs.setAttribute('aria-label', `Logs of ${w.task}`);
    logs.addEventListener('click', () => showLogs(w));
    const button = (label, what, act) => {
      const b = document.createElement('button');
      b.type = 'button';
      text(b, label);
      b.setAttribute('aria-label', `${what} ${w.task}`);
      b.addEventListener('click', act);
      return b;
    };
    actions.append(logs);
    if (w.state === 'suspended') {
      actions.append(button('Resume', 'Resume', () => lifetime(w, 'resume')));
    } else if (w.state === 'running' || w.state === 'starting') {
      actions.append(button('Renew', 'Renew', () => renewWorker(w)));
      actions.append(button('Suspend', 'Suspend', () => lifetime(w, 'suspend')));
    }
    actions.append(button('Stop', 'Stop', () => stopWorker(w)));
    tr.append(actions);
    body.append(tr);
  }
  if (focused) {
    const again = [...body.querySelectorAll('button')].find((b) => b.getAttribute('aria-label') === focused);
    if (again) again.focus();
  }
}

// One event of the watch, kept (newest first, at most MAX_EVENTS) and shown.
function logEvent(event) {
  events.unshift(event);
  events.length = Math.min(events.length, MAX_EVENTS);
  const list = $('event-log');
  list.replaceChildren(...events.map((e) => {
    const li = document.createElement('li');
    const at = document.createElement('time');
    at.dateTime = e.at;
    text(at, (e.at || '').replace('T', ' ').replace(/\.\d+Z$|Z$/, ''));
    const kind = document.createElement('span');
    kind.className = `event event-${e.type}`;
    text(kind, e.type);
    const w = e.worker || {};
    const what = document.createElement('span');
    text(what, ` ${w.task || ''} (${w.worker_id || ''}) ${w.state || ''}${e.reason ? `: ${e.reason}` : ''}`);
    li.append(at, ' ', kind, what);
    return li;
  }));
  $('events-empty').hidden = events.length > 0;
}

function connection(state) {
  const heard = lastHeard ? ` — last heard ${ago(new Date(lastHeard).toISOString())}` : '';
  text($('connection'), `${state}${heard}`);
}

async function refreshList() {
  const data = await control({ operation: 'list' });
  workers.clear();
  for (const w of data.workers) workers.set(w.worker_id, w);
  render();
}

// The watch stream: one event per status update; the stream's end or a failure reconnects.
// A stream silent for longer than two of its 15 s heartbeats is taken for dead.
async function watch() {
  const abort = new AbortController();
  const stale = setInterval(() => { if (Date.now() - lastHeard > 35000) abort.abort(); }, 5000);
  try {
    await watchWith(abort.signal);
  } finally {
    clearInterval(stale);
  }
}

async function watchWith(signal) {
  const r = await fetch('/a2a', {
    method: 'POST',
    signal,
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${token}` },
    body: JSON.stringify({ jsonrpc: '2.0', id: 'watch', method: 'SendStreamingMessage', params: message({ operation: 'watch' }) }),
  });
  lastHeard = Date.now();
  if (r.status === 401) throw Object.assign(new Error('the token was refused'), { unauthorized: true });
  const reader = r.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  let snapshot = new Map();
  let synced = false;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    lastHeard = Date.now();
    buffer += decoder.decode(value, { stream: true });
    let at;
    while ((at = buffer.indexOf('\n\n')) >= 0) {
      const chunk = buffer.slice(0, at);
      buffer = buffer.slice(at + 2);
      const line = chunk.split('\n').find((l) => l.startsWith('data: '));
      if (!line) continue;
      const result = JSON.parse(line.slice(6)).result || {};
      const status = (result.statusUpdate || {}).status || (result.task || {}).status;
      if (!status) continue;
      if (status.state === 'TASK_STATE_FAILED' && result.task) throw new Error(status.message.parts[0].text);
      const parts = (status.message || {}).parts || [];
      const event = parts[1] && parts[1].data && parts[1].data.event;
      if (!event) continue;
      if (event.type === 'synced') {
        workers.clear();
        for (const [k, w] of snapshot) workers.set(k, w);
        synced = true;
        connection('live');
      } else if (!synced) {
        snapshot.set(event.worker.worker_id, event.worker);
      } else if (event.type === 'removed') {
        workers.delete(event.worker.worker_id);
        logEvent(event);
      } else {
        workers.set(event.worker.worker_id, event.worker);
        logEvent(event);
      }
      if (synced) render();
    }
  }
}

async function follow() {
  for (;;) {
    try {
      await watch();
      connection('reconnecting…');
    } catch (e) {
      if (e.unauthorized) return signIn('The token was refused: enter it again.');
      connection(lastHeard ? 'reconnecting…' : 'controller unreachable');
      // Without a watch, list every 2 s until it is back.
      try { await refreshList(); connection('reconnecting… (listing every 2 s)'); } catch (_) { connection('controller unreachable'); }
    }
    await new Promise((r) => setTimeout(r, 2000));
  }
}

async function header() {
  try {
    const card = await (await fetch('/.well-known/agent-card.json')).json();
    text($('name'), card.name);
    const ext = await rpc('GetExtendedAgentCard', {});
    const p = ((ext.capabilities.extensions || [])[0] || {}).params || {};
    text($('about'), `backend ${p.backend || '?'} · version ${p.version || card.version}`);
  } catch (_) { /* the header is a nicety */ }
  const ready = await fetch('/readiness').then(async (r) => (r.ok ? 'ready' : await r.text())).catch(() => 'controller unreachable');
  text($('readiness'), ready);
}

// The templates this caller may create from (the templates operation): the create form's
// choice, with what each starts.
let templates = [];
function describeTemplate() {
  const t = templates.find((x) => x.name === $('template').value);
  if (!t) { text($('template-about'), ''); return; }
  const parts = [t.image];
  if (t.memory_bytes) parts.push(`${Math.round(t.memory_bytes / 1048576)} MiB`);
  if (t.cpus) parts.push(`${t.cpus} CPUs`);
  if (t.workspace) parts.push(`workspace ${t.workspace.path} (${t.workspace.size})`);
  if (t.pool) parts.push(t.pool.min < t.pool.max ? `warm pool of ${t.pool.min}–${t.pool.max} after the demand` : `warm pool of ${t.pool.size}`);
  if (t.description) parts.unshift(t.description);
  text($('template-about'), parts.join(' · '));
}
async function loadTemplates() {
  try {
    templates = (await control({ operation: 'templates' })).templates || [];
  } catch (e) {
    templates = [];
  }
  const select = $('template');
  select.replaceChildren();
  for (const t of templates) {
    const option = document.createElement('option');
    option.value = t.name;
    text(option, t.name);
    if (t.name === 'default') option.selected = true;
    select.append(option);
  }
  describeTemplate();
  renderPools(templates);
}

// The header's warm pools: the members ready of those each pooled template keeps, asked
// again every 5 s.
function renderPools(list) {
  const pooled = list.filter((t) => t.pool);
  text($('pools'), pooled.length ? `warm pool: ${pooled.map((t) => `${t.name} ${t.pool.ready}/${t.pool.size} ready${t.pool.min < t.pool.max ? ` (${t.pool.min}–${t.pool.max})` : ''}`).join(' · ')}` : '');
}
async function refreshPools() {
  try {
    renderPools((await control({ operation: 'templates' })).templates || []);
  } catch (_) { /* the header is a nicety */ }
}

async function showLogs(w) {
  $('logs').hidden = false;
  text($('logs-title'), `Logs of ${w.task} (${w.worker_id})`);
  $('logs-refresh').onclick = () => showLogs(w);
  try {
    const data = await control({ operation: 'logs', worker_id: w.worker_id, tail: 200 });
    text($('logs-text'), data.text);
    text($('logs-note'), data.truncated ? 'cut to the last 1 MiB' : '');
    $('logs-text').scrollTop = $('logs-text').scrollHeight;
  } catch (e) {
    text($('logs-note'), e.message);
  }
}

// Suspend or resume: the worker as the reply says it is now.
async function lifetime(w, operation) {
  try {
    const data = await control({ operation, worker_id: w.worker_id });
    workers.set(w.worker_id, data.worker);
    render();
  } catch (e) {
    text($('create-result'), e.message);
  }
}

async function renewWorker(w) {
  const ttl = window.prompt(`Renew the worker of task "${w.task}" for (e.g. 2h, 90m):`, '1h');
  if (!ttl) return;
  try {
    const data = await control({ operation: 'renew', worker_id: w.worker_id, ttl });
    workers.set(w.worker_id, data.worker);
    render();
  } catch (e) {
    text($('create-result'), e.message);
  }
}

async function stopWorker(w) {
  if (!window.confirm(`Stop the worker of task "${w.task}"?`)) return;
  try {
    await control({ operation: 'stop', worker_id: w.worker_id });
    workers.delete(w.worker_id);
    render();
  } catch (e) {
    text($('create-result'), e.message);
  }
}

function signIn(why) {
  token = '';
  sessionStorage.removeItem('a2a-token');
  $('app').hidden = true;
  $('login').hidden = false;
  text($('login-error'), why || '');
  $('token').focus();
}

async function start() {
  try {
    await refreshList();
  } catch (e) {
    return signIn(e.unauthorized ? 'The token was refused: enter it again.' : e.message);
  }
  $('login').hidden = true;
  $('app').hidden = false;
  connection('connecting…');
  header();
  loadTemplates();
  setInterval(refreshPools, 5000);
  if (!watching) watching = follow();
}

document.addEventListener('DOMContentLoaded', () => {
  $('login-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    token = $('token').value;
    $('token').value = '';
    if ($('remember').checked) sessionStorage.setItem('a2a-token', token);
    start();
  });
  $('create-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const req = { operation: 'create', task: $('task').value };
    if ($('template').value) req.template = $('template').value;
    if ($('ttl').value) req.ttl = /^\d+$/.test($('ttl').value) ? Number($('ttl').value) : $('ttl').value;
    text($('create-result'), 'creating…');
    try {
      const data = await control(req);
      text($('create-result'), `created worker ${data.worker.worker_id}`);
      workers.set(data.worker.worker_id, data.worker);
      render();
      if (data.token) {
        $('token-once').hidden = false;
        text($('token-value'), data.token);
      }
    } catch (e) {
      text($('create-result'), e.message);
    }
  });
  $('template').addEventListener('change', describeTemplate);
  $('copy-token').addEventListener('click', () => navigator.clipboard && navigator.clipboard.writeText($('token-value').textContent));
  $('logs-close').addEventListener('click', () => { $('logs').hidden = true; });
  // Countdowns move; nothing else needs a redraw without an event.
  setInterval(() => { if ([...workers.values()].some((w) => w.expires_at)) render(); }, 1000);
  if (token) start(); else signIn('');
});
