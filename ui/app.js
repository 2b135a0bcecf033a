// ui/app.js - the web UI of `ferry serve`: plain JavaScript, no build step, embedded in the
// binary. Views (hash routes): #/pipelines, #/pipelines/NAME, #/runs, #/runs/ID, #/secrets.
// Every API call sends the bearer token kept in sessionStorage (from the login form or
// from #token=... in the address, which is removed at once). The run page follows
// GET /v1/runs/ID/events with fetch() streaming (EventSource cannot send headers), replays
// from the last sequence on reconnect, and refreshes the run's state at most once a second.
'use strict';

const $ = (sel) => document.querySelector(sel);
const esc = (s) => String(s ?? '').replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));
const fmtInt = (n) => Number(n || 0).toLocaleString('en-US');
const fmtBytes = (n) => { n = Number(n || 0); const u = ['B', 'kB', 'MB', 'GB', 'TB']; let i = 0; while (n >= 1000 && i < u.length - 1) { n /= 1000; i++; } return `${n.toFixed(i ? 1 : 0)} ${u[i]}`; };
const fmtTime = (us) => us ? new Date(us / 1000).toISOString().replace('T', ' ').slice(0, 19) + 'Z' : '—';
const badge = (s) => `<span class="badge ${esc(s)}" data-state="${esc(s)}">${esc(s)}</span>`;
const FINAL = new Set(['completed', 'partial', 'failed', 'canceled']);

let token = sessionStorage.getItem('ferry-token') || '';
let current = null; // the active view's cleanup

function takeTokenFromHash() {
  const m = location.hash.match(/token=([^&]+)/);
  if (m) {
    token = decodeURIComponent(m[1]);
    sessionStorage.setItem('ferry-token', token);
    history.replaceState(null, '', location.pathname + '#/pipelines');
  }
}

class ApiError extends Error {
  constructor(status, body) { super(body?.error?.message || `HTTP ${status}`); this.status = status; this.code = body?.error?.code; }
}

async function api(method, path, body) {
  const opts = { method, headers: { Authorization: `Bearer ${token}` } };
  if (body !== undefined) { opts.headers['Content-Type'] = 'application/json'; opts.body = JSON.stringify(body); }
  const r = await fetch(path, opts);
  const text = await r.text();
  let j = null;
  try { j = text ? JSON.parse(text) : null; } catch { j = null; }
  if (r.status === 401) { showLogin('The token was refused.'); throw new ApiError(401, j); }
  if (!r.ok) throw new ApiError(r.status, j);
  return j;
}

function showLogin(msg) {
  $('#login').hidden = false;
  $('#view').hidden = true;
  $('#logout').hidden = true;
  $('#login-error').hidden = !msg;
  $('#login-error').textContent = msg || '';
}

$('#login-form').addEventListener('submit', (e) => {
  e.preventDefault();
  token = $('#token').value.trim();
  sessionStorage.setItem('ferry-token', token);
  route();
});
$('#logout').addEventListener('click', () => { sessionStorage.removeItem('ferry-token'); token = ''; showLogin(); });

function setNav(which) {
  for (const a of document.querySelectorAll('header nav a')) a.classList.toggle('active', a.id === `nav-${which}`);
}

function viewError(err) {
  $('#view').innerHTML = `<div class="errorbox">${esc(err.message)}</div>`;
}

// ---- pipelines ----

async function pipelinesView() {
  setNav('pipelines');
  const v = $('#view');
  v.innerHTML = '<h1>Pipelines</h1><div class="card" id="pipes">Loading…</div>';
  const load = async () => {
    const j = await api('GET', '/v1/pipelines');
    if (!j.pipelines.length) {
      $('#pipes').innerHTML = '<p><a href="#/edit" id="new-pipeline">New pipeline</a></p><p class="muted">No pipeline yet. Register one: <code>curl -X POST --data-binary @pipeline.yaml -H "Authorization: Bearer …" /v1/pipelines</code> or <code>ferry pipelines apply FILE --server URL</code>.</p>';
      return;
    }
    $('#pipes').innerHTML = `<p><a href="#/edit" id="new-pipeline">New pipeline</a></p><table><thead><tr><th>Pipeline</th><th class="hide-narrow">Version</th><th class="hide-narrow">Schedules</th><th>Last run</th><th></th></tr></thead><tbody>${
      j.pipelines.map((p) => `<tr data-pipeline="${esc(p.name)}">
        <td><a href="#/pipelines/${encodeURIComponent(p.name)}">${esc(p.name)}</a></td>
        <td class="hide-narrow mono" title="${esc(p.version)}">${esc(p.version.slice(0, 12))} <span class="muted">(${p.versions})</span></td>
        <td class="hide-narrow">${p.schedules.length ? p.schedules.map((s) => `<code>${esc(s.cron)}</code> ${esc(s.timezone)}`).join('<br>') : '<span class="muted">—</span>'}</td>
        <td>${p.last_run ? `<a href="#/runs/${p.last_run.id}">#${p.last_run.id}</a> ${badge(p.last_run.state)}` : '<span class="muted">never</span>'}</td>
        <td><button class="start" data-name="${esc(p.name)}">Start run</button></td></tr>`).join('')}</tbody></table>`;
    for (const b of document.querySelectorAll('button.start')) {
      b.addEventListener('click', async () => {
        b.disabled = true;
        try {
          const r = await api('POST', `/v1/pipelines/${encodeURIComponent(b.dataset.name)}/runs`, {});
          location.hash = `#/runs/${r.id}`;
        } catch (err) { b.disabled = false; alert(err.message); }
      });
    }
  };
  await load();
}

async function pipelineView(name) {
  setNav('pipelines');
  const [p, vs] = await Promise.all([
    api('GET', `/v1/pipelines/${encodeURIComponent(name)}`),
    api('GET', `/v1/pipelines/${encodeURIComponent(name)}/versions`),
  ]);
  const runs = await api('GET', `/v1/runs?pipeline=${encodeURIComponent(name)}&limit=20`);
  $('#view').innerHTML = `<h1>${esc(p.name)} <button id="start">Start run</button></h1>
    <div class="stats">
      <div class="stat"><b class="mono">${esc(p.version.slice(0, 12))}</b><span>current version</span></div>
      <div class="stat"><b>${p.versions}</b><span>versions</span></div>
      <div class="stat"><b>${p.retries}</b><span>retries when a worker is lost</span></div>
    </div>
    <p><a href="#/edit/${encodeURIComponent(p.name)}" id="edit">Edit the pipeline</a></p>
    <h2>Schedules</h2><div class="card">${p.schedules.length ? `<table><thead><tr><th>Cron</th><th>Zone</th><th>Overlap</th><th>Next</th><th class="hide-narrow">Last run</th><th></th></tr></thead><tbody>${
      p.schedules.map((s) => `<tr data-schedule="${s.id}"><td><code>${esc(s.cron)}</code>${s.enabled ? '' : ' <span class="muted">(off)</span>'}</td><td>${esc(s.timezone)}</td><td>${esc(s.overlap)}</td><td>${fmtTime(s.next_us)}</td><td class="hide-narrow">${s.last_run ? `<a href="#/runs/${s.last_run}">#${s.last_run}</a>` : '—'}</td><td><button class="s-toggle" data-id="${s.id}" data-enabled="${s.enabled}">${s.enabled ? 'Switch off' : 'Switch on'}</button> <button class="s-rm danger" data-id="${s.id}">Remove</button></td></tr>`).join('')}</tbody></table>` : '<span class="muted">none</span>'}
      <form id="s-add" class="inline"><input id="s-cron" placeholder="cron: 0 3 * * *" required> <input id="s-tz" placeholder="UTC"> <select id="s-overlap"><option>skip</option><option>queue</option><option>allow</option></select> <button type="submit">Add schedule</button> <span id="s-error" class="error"></span></form></div>
    <h2>Versions</h2><div class="card"><table><thead><tr><th>Version</th><th>Recorded</th></tr></thead><tbody>${
      vs.versions.map((v) => `<tr><td class="mono">${esc(v.version.slice(0, 16))}${v.current ? ' <span class="badge completed">current</span>' : ''}</td><td>${fmtTime(v.created_us)}</td></tr>`).join('')}</tbody></table></div>
    <h2>Recent runs</h2><div class="card">${runsTable(runs.runs)}</div>
    <h2>Spec <span class="muted">(secrets are references)</span></h2><div class="card"><pre>${esc(JSON.stringify(p.spec, null, 2))}</pre></div>`;
  $('#start').addEventListener('click', async () => {
    const r = await api('POST', `/v1/pipelines/${encodeURIComponent(name)}/runs`, {});
    location.hash = `#/runs/${r.id}`;
  });
  scheduleForm(name, () => pipelineView(name));
}

// ---- authoring: the pipeline editor (#/edit, #/edit/NAME) ----
// The server validates (POST /v1/pipelines); a refusal names the key and its line, which the
// gutter marks. An existing pipeline is edited from its saved request (JSON is YAML).

async function editView(name) {
  setNav('pipelines');
  let text = 'version: 1\nname: \nsource:\n  type: sample\n  rows: 1000\n  resources:\n    - {table: orders, mode: full}\nsink:\n  type: sqlite\n  path: /tmp/out.db\n';
  if (name) text = JSON.stringify((await api('GET', `/v1/pipelines/${encodeURIComponent(name)}`)).spec, null, 2) + '\n';
  $('#view').innerHTML = `<h1>${name ? `Edit ${esc(name)}` : 'New pipeline'}</h1>
    <div id="e-error"></div>
    <div class="card editor"><pre id="e-gutter" class="gutter"></pre><textarea id="e-text" spellcheck="false" wrap="off"></textarea></div>
    <p><button id="e-save">Validate and save</button> <span class="muted">secrets only as references: secret:NAME (<a href="#/secrets">Secrets</a>), env:NAME or file:PATH</span></p>`;
  const ta = $('#e-text');
  ta.value = text;
  let bad = 0;
  const gutter = () => {
    const n = ta.value.split('\n').length;
    $('#e-gutter').innerHTML = Array.from({ length: n }, (_, i) => `<span data-line="${i + 1}"${i + 1 === bad ? ' class="error-line"' : ''}>${i + 1}</span>`).join('\n');
    $('#e-gutter').scrollTop = ta.scrollTop;
  };
  ta.addEventListener('input', () => { bad = 0; gutter(); });
  ta.addEventListener('scroll', () => { $('#e-gutter').scrollTop = ta.scrollTop; });
  gutter();
  $('#e-save').addEventListener('click', async () => {
    const r = await fetch('/v1/pipelines', { method: 'POST', headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/yaml' }, body: ta.value });
    const j = await r.json().catch(() => null);
    if (r.ok) { location.hash = `#/pipelines/${encodeURIComponent(j.name)}`; return; }
    const msg = j?.error?.message || `HTTP ${r.status}`;
    const m = msg.match(/\(line (\d+)\)|line (\d+)/);
    bad = m ? Number(m[1] || m[2]) : 0;
    $('#e-error').innerHTML = `<div class="errorbox" id="edit-error"${bad ? ` data-line="${bad}"` : ''}>${bad ? `line ${bad}: ` : ''}${esc(msg)}</div>`;
    gutter();
    if (bad) {
      const lines = ta.value.split('\n');
      const start = lines.slice(0, bad - 1).join('\n').length + (bad > 1 ? 1 : 0);
      ta.focus();
      ta.setSelectionRange(start, start + (lines[bad - 1] || '').length);
    }
  });
}

// Schedules of a pipeline: create, switch on/off, remove (POST/PATCH/DELETE /v1/schedules).
function scheduleForm(name, reload) {
  $('#s-add').addEventListener('submit', async (e) => {
    e.preventDefault();
    try {
      await api('POST', '/v1/schedules', { pipeline: name, cron: $('#s-cron').value.trim(), timezone: $('#s-tz').value.trim() || 'UTC', overlap: $('#s-overlap').value });
      reload();
    } catch (err) { $('#s-error').textContent = err.message; }
  });
  for (const b of document.querySelectorAll('button.s-rm'))
    b.addEventListener('click', async () => { await api('DELETE', `/v1/schedules/${b.dataset.id}`); reload(); });
  for (const b of document.querySelectorAll('button.s-toggle'))
    b.addEventListener('click', async () => { await api('PATCH', `/v1/schedules/${b.dataset.id}`, { enabled: b.dataset.enabled !== 'true' }); reload(); });
}

// ---- secrets (#/secrets): write-only values ----
// PUT /v1/secrets/NAME stores or replaces a value (the body is the value), DELETE removes it;
// GET /v1/secrets lists names, times and the pipelines that reference them, never a value.
// The value field is a password input, cleared once sent; nothing shows a value again.

async function secretsView() {
  setNav('secrets');
  $('#view').innerHTML = `<h1>Secrets</h1>
    <p class="muted">Referenced in pipelines as <code>secret:NAME</code>. Values are encrypted in the state store and never shown again; replace one by saving the same name.</p>
    <div class="card"><form id="sec-form" class="inline" autocomplete="off">
      <input id="sec-name" placeholder="name" required>
      <input id="sec-value" type="password" placeholder="value" autocomplete="new-password" required>
      <button type="submit">Save secret</button> <span id="sec-msg" class="muted"></span><span id="sec-error" class="error"></span>
    </form></div>
    <h2>Stored</h2><div class="card" id="sec-list">Loading…</div>
    <h2>Other references in pipelines</h2><div class="card" id="sec-refs"></div>`;
  const load = async () => {
    const j = await api('GET', '/v1/secrets');
    const stored = j.secrets.filter((x) => x.kind === 'secret' && x.stored);
    const refs = j.secrets.filter((x) => !(x.kind === 'secret' && x.stored));
    const used = (x) => x.pipelines.length ? x.pipelines.map((p) => `<a href="#/pipelines/${encodeURIComponent(p)}">${esc(p)}</a>`).join(', ') : '<span class="muted">no pipeline</span>';
    $('#sec-list').innerHTML = stored.length ? `<table><thead><tr><th>Name</th><th>Updated</th><th class="hide-narrow">Used by</th><th></th></tr></thead><tbody>${
      stored.map((x) => `<tr data-secret="${esc(x.name)}"><td><code>${esc(x.name)}</code></td><td>${fmtTime(x.updated_us)}</td><td class="hide-narrow">${used(x)}</td><td><button class="sec-replace" data-name="${esc(x.name)}">Replace value</button> <button class="sec-rm danger" data-name="${esc(x.name)}">Delete</button></td></tr>`).join('')}</tbody></table>` : '<span class="muted">none</span>';
    $('#sec-refs').innerHTML = refs.length ? `<table><thead><tr><th>Reference</th><th>Used by</th></tr></thead><tbody>${
      refs.map((x) => `<tr><td><code>${esc(x.ref)}</code>${x.kind === 'secret' ? ' <span class="error">not stored</span>' : ''}</td><td>${used(x)}</td></tr>`).join('')}</tbody></table>` : '<span class="muted">none</span>';
    for (const b of document.querySelectorAll('button.sec-replace'))
      b.addEventListener('click', () => { $('#sec-name').value = b.dataset.name; $('#sec-value').value = ''; $('#sec-value').focus(); });
    for (const b of document.querySelectorAll('button.sec-rm'))
      b.addEventListener('click', async () => {
        $('#sec-error').textContent = '';
        try { await api('DELETE', `/v1/secrets/${encodeURIComponent(b.dataset.name)}`); $('#sec-msg').textContent = `deleted ${b.dataset.name}`; await load(); } catch (err) { $('#sec-error').textContent = err.message; }
      });
  };
  $('#sec-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    $('#sec-msg').textContent = '';
    $('#sec-error').textContent = '';
    const name = $('#sec-name').value.trim();
    const value = $('#sec-value').value;
    $('#sec-value').value = ''; // never kept in the page
    const r = await fetch(`/v1/secrets/${encodeURIComponent(name)}`, { method: 'PUT', headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/octet-stream' }, body: value });
    const j = await r.json().catch(() => null);
    if (!r.ok) { $('#sec-error').textContent = j?.error?.message || `HTTP ${r.status}`; return; }
    $('#sec-msg').textContent = `saved ${name}`;
    $('#sec-name').value = '';
    await load();
  });
  await load();
}

// ---- runs ----

function runsTable(runs) {
  if (!runs.length) return '<span class="muted">no run</span>';
  return `<table><thead><tr><th>Run</th><th>Pipeline</th><th>State</th><th class="num">Rows</th><th class="hide-narrow">Created</th></tr></thead><tbody>${
    runs.map((r) => `<tr data-run="${r.id}"><td><a href="#/runs/${r.id}">#${r.id}</a></td><td>${esc(r.pipeline)}</td><td>${badge(r.state)}${r.attempt > 1 ? ` <span class="muted">attempt ${r.attempt}</span>` : ''}${r.error ? `<div class="resource-error">${esc(r.error)}</div>` : ''}</td><td class="num">${fmtInt(r.rows)}</td><td class="hide-narrow">${fmtTime(r.created_us)}</td></tr>`).join('')}</tbody></table>`;
}

async function runsView(params) {
  setNav('runs');
  const pipes = await api('GET', '/v1/pipelines');
  const states = ['', 'requested', 'running', 'paused', 'completed', 'partial', 'failed', 'canceled'];
  $('#view').innerHTML = `<h1>Runs</h1>
    <div class="filters">
      <label>Pipeline <select id="f-pipeline"><option value="">all</option>${pipes.pipelines.map((p) => `<option${params.get('pipeline') === p.name ? ' selected' : ''}>${esc(p.name)}</option>`).join('')}</select></label>
      <label>State <select id="f-state">${states.map((s) => `<option value="${s}"${params.get('state') === s ? ' selected' : ''}>${s || 'any'}</option>`).join('')}</select></label>
    </div><div class="card" id="runs">Loading…</div>`;
  const refilter = () => {
    const q = new URLSearchParams();
    if ($('#f-pipeline').value) q.set('pipeline', $('#f-pipeline').value);
    if ($('#f-state').value) q.set('state', $('#f-state').value);
    location.hash = `#/runs${q.toString() ? '?' + q : ''}`;
  };
  $('#f-pipeline').addEventListener('change', refilter);
  $('#f-state').addEventListener('change', refilter);
  const q = new URLSearchParams();
  for (const k of ['pipeline', 'state']) if (params.get(k)) q.set(k, params.get(k));
  q.set('limit', '100');
  const load = async () => { $('#runs').innerHTML = runsTable((await api('GET', `/v1/runs?${q}`)).runs); };
  await load();
  const timer = setInterval(() => load().catch(() => {}), 2000);
  return () => clearInterval(timer);
}

// The run page: state from GET /v1/runs/ID, live facts from the event stream.
async function runView(id) {
  setNav('runs');
  const live = { rates: [], bucket: 0, bucketRows: 0, seq: 0, stopped: false, events: [] };
  $('#view').innerHTML = `<h1>Run #${esc(id)} <span id="r-state"></span> <span id="r-pipeline" class="muted"></span></h1>
    <div id="r-error"></div>
    <div class="actions">
      <button id="b-pause" class="secondary">Pause</button>
      <button id="b-resume" class="secondary">Resume</button>
      <button id="b-cancel" class="danger">Cancel</button>
      <span id="b-msg" class="error"></span>
    </div>
    <div class="stats" id="r-stats"></div>
    <h2>Resources</h2><div class="card" id="r-resources"></div>
    <h2>Attempts</h2><div class="card" id="r-attempts"></div>
    <h2>Rows per second</h2><div class="card"><canvas id="r-chart" width="1000" height="140"></canvas><div class="muted" id="r-rate"></div></div>
    <h2>Checkpoints</h2><div class="card" id="r-checkpoints"></div>
    <h2>Worker log <span class="muted">(last 50 lines)</span></h2><div class="card"><pre id="r-log" class="mono">…</pre></div>
    <h2>Events <span class="muted" id="r-evcount"></span></h2><div class="card"><div id="feed"></div></div>`;
  let run = null;
  const render = () => {
    if (!run) return;
    $('#r-state').innerHTML = badge(run.state) + (run.attempt > 1 ? ` <span class="muted">attempt ${run.attempt}</span>` : '');
    $('#r-pipeline').innerHTML = `<a href="#/pipelines/${encodeURIComponent(run.pipeline)}">${esc(run.pipeline)}</a>`;
    $('#r-error').innerHTML = run.error ? `<div class="errorbox" id="run-error">${esc(run.error)}</div>` : '';
    $('#b-pause').disabled = run.state !== 'running';
    $('#b-resume').disabled = !(run.state === 'paused' || run.state === 'failed');
    $('#b-cancel').disabled = FINAL.has(run.state);
    const end = run.ended_us || Date.now() * 1000;
    const secs = run.started_us ? Math.max(0.001, (end - run.started_us) / 1e6) : 0;
    $('#r-stats').innerHTML = [
      [fmtInt(run.rows), 'rows', 'stat-rows'], [fmtBytes(run.bytes), 'moved'], [fmtInt(run.batches), 'batches'],
      [fmtInt(run.integrity.verified), 'batches verified'], [fmtInt(run.integrity.diverged), 'diverged'],
      [secs ? `${secs.toFixed(1)} s` : '—', 'elapsed'], [secs ? fmtInt(Math.round(run.rows / secs)) : '—', 'rows/s average'],
      ...(run.worker_exit === null || run.worker_exit === undefined ? [] : [[run.worker_exit < 0 ? `signal ${-run.worker_exit}` : `status ${run.worker_exit}`, 'last worker exit']]),
    ].map(([v, l, idn]) => `<div class="stat"${idn ? ` id="${idn}"` : ''}><b>${v}</b><span>${l}</span></div>`).join('');
    $('#r-resources').innerHTML = run.resources.length ? `<table><thead><tr><th>Resource</th><th class="hide-narrow">Mode</th><th>State</th><th class="num">Rows</th><th class="num hide-narrow">Verified</th><th class="num hide-narrow">Diverged</th></tr></thead><tbody>${
      run.resources.map((r) => {
        const cls = r.state === 'completed' ? 'done' : r.state === 'failed' ? 'failed' : (run.state === 'running' ? 'indeterminate' : '');
        return `<tr data-resource="${esc(r.resource)}"><td>${esc(r.resource)}<div class="bar ${cls}"><i></i></div>${r.error ? `<div class="resource-error">${esc(r.error)}</div>` : ''}</td>
          <td class="hide-narrow">${esc(r.mode)} → ${esc(r.write)}</td><td>${badge(r.state)}</td><td class="num">${fmtInt(r.rows)}</td>
          <td class="num hide-narrow">${fmtInt(r.integrity.verified)}</td><td class="num hide-narrow${r.integrity.diverged ? ' error' : ''}">${fmtInt(r.integrity.diverged)}</td></tr>`;
      }).join('')}</tbody></table>` : '<span class="muted">not started yet</span>';
    const att = run.attempts || [];
    $('#r-attempts').innerHTML = att.length ? `<table><thead><tr><th>Attempt</th><th>State</th><th class="hide-narrow">Started</th><th>Error, retry</th></tr></thead><tbody>${
      att.map((a) => `<tr data-attempt="${a.attempt}"><td>#${a.attempt}</td><td>${badge(a.state)}</td><td class="hide-narrow">${a.started_us ? fmtTime(a.started_us) : '—'}</td><td>${a.error ? `<div class="resource-error">${esc(a.error)}</div>` : ''}${a.retry_scheduled ? `<span class="muted">retry scheduled${a.retry_at_us ? ' for ' + fmtTime(a.retry_at_us) : ''}</span>` : ''}</td></tr>`).join('')}</tbody></table>` : '<span class="muted">none yet</span>';
    const cps = run.resources.flatMap((r) => r.checkpoints.map((c) => ({ r: r.resource, ...c })));
    $('#r-checkpoints').innerHTML = cps.length ? `<table><thead><tr><th>Resource</th><th>Shard</th><th>Position</th><th class="hide-narrow">Saved</th></tr></thead><tbody>${
      cps.map((c) => `<tr><td>${esc(c.r)}</td><td>${c.shard}</td><td class="mono">${esc(JSON.stringify(c.position))}</td><td class="hide-narrow">${fmtTime(c.updated_us)}</td></tr>`).join('')}</tbody></table>` : '<span class="muted">none yet</span>';
  };
  const loadLog = async () => {
    try {
      const l = await api('GET', `/v1/runs/${id}/log?lines=50`);
      $('#r-log').textContent = l.lines.join('\n') || '(empty)';
    } catch (err) { if ($('#r-log')) $('#r-log').textContent = err.status === 404 ? 'no worker log on this server' : err.message; }
  };
  const refresh = async () => { run = await api('GET', `/v1/runs/${id}`); render(); loadLog(); };
  await refresh();

  // rows/s: batch.written rows per wall-clock second, drawn as bars.
  const drawChart = () => {
    const c = $('#r-chart');
    if (!c) return;
    // Drawn at the canvas's displayed size, so text and bars stay sharp in any window.
    const dpr = window.devicePixelRatio || 1;
    const cw = Math.max(100, Math.round(c.clientWidth * dpr)), chh = Math.round(140 * dpr);
    if (c.width !== cw || c.height !== chh) { c.width = cw; c.height = chh; }
    const g = c.getContext('2d');
    g.clearRect(0, 0, c.width, c.height);
    const pts = live.rates.slice(-120);
    const max = Math.max(1, ...pts.map((p) => p.rows));
    const w = c.width / Math.max(pts.length, 30);
    const top = 20 * dpr;
    g.fillStyle = '#1f5fbf';
    pts.forEach((p, i) => { const h = (p.rows / max) * (c.height - top); g.fillRect(i * w, c.height - h, Math.max(1, w - 2 * dpr), h); });
    g.fillStyle = '#6b6b66';
    g.font = `${12 * dpr}px system-ui, sans-serif`;
    if (pts.length) g.fillText(`peak ${fmtInt(max)} rows/s`, 4 * dpr, 14 * dpr);
    const last = pts[pts.length - 1];
    $('#r-rate').textContent = pts.length ? `last second: ${fmtInt(last.rows)} rows/s, ${pts.length} s shown` : 'waiting for batches…';
    c.dataset.points = String(pts.length);
  };
  const onEvent = (ev) => {
    live.seq = Math.max(live.seq, ev.seq);
    if (ev.type === 'batch.written') {
      const sec = Math.floor(ev.time_us / 1e6);
      const b = live.rates.length ? live.rates[live.rates.length - 1] : null;
      if (b && b.sec === sec) b.rows += ev.payload.rows || 0;
      else {
        if (b) for (let s = b.sec + 1; s < sec && s - b.sec < 120; s++) live.rates.push({ sec: s, rows: 0 });
        live.rates.push({ sec, rows: ev.payload.rows || 0 });
      }
    }
    if (ev.type === 'batch.buffered') return; // too many to list; written ones tell progress
    live.events.push(ev);
    const feed = $('#feed');
    if (!feed) return;
    const bad = /failed|divergence|lost|canceled/.test(ev.type);
    const div = document.createElement('div');
    const detail = ev.type === 'batch.written' ? `${fmtInt(ev.payload.rows)} rows, shard ${ev.payload.shard}`
      : ev.payload && ev.payload.message ? ev.payload.message : JSON.stringify(ev.payload);
    div.innerHTML = `<span class="t">${fmtTime(ev.time_us).slice(11, 19)} #${ev.seq}</span><span class="ty${bad ? ' bad' : ''}">${esc(ev.type)}</span>${ev.resource ? `<b>${esc(ev.resource)}</b> ` : ''}<span class="muted">${esc(detail)}</span>`;
    feed.prepend(div);
    while (feed.children.length > 300) feed.lastChild.remove();
    $('#r-evcount').textContent = `(${live.events.length})`;
  };

  let dirty = false;
  const ctl = new AbortController();
  const follow = async () => {
    while (!live.stopped) {
      try {
        const r = await fetch(`/v1/runs/${id}/events?after=${live.seq}`, { headers: { Authorization: `Bearer ${token}` }, signal: ctl.signal });
        if (!r.ok) throw new Error(`events: HTTP ${r.status}`);
        const reader = r.body.getReader();
        const dec = new TextDecoder();
        let buf = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += dec.decode(value, { stream: true });
          let i;
          while ((i = buf.indexOf('\n\n')) >= 0) {
            const block = buf.slice(0, i);
            buf = buf.slice(i + 2);
            const data = block.split('\n').filter((l) => l.startsWith('data: ')).map((l) => l.slice(6)).join('\n');
            if (data) { onEvent(JSON.parse(data)); dirty = true; }
          }
        }
        await refresh();
        if (FINAL.has(run.state)) break; // the stream ended with the run
      } catch (err) {
        if (live.stopped) return;
        await new Promise((res) => setTimeout(res, 1000));
      }
    }
  };
  follow();
  const timer = setInterval(() => {
    drawChart();
    if (dirty || (run && !FINAL.has(run.state))) { dirty = false; refresh().catch(() => {}); }
  }, 1000);
  drawChart();

  const act = (what) => async () => {
    $('#b-msg').textContent = '';
    try { await api('POST', `/v1/runs/${id}/${what}`); await refresh(); } catch (err) { $('#b-msg').textContent = err.message; }
  };
  $('#b-pause').addEventListener('click', act('pause'));
  $('#b-resume').addEventListener('click', act('resume'));
  $('#b-cancel').addEventListener('click', act('cancel'));
  return () => { live.stopped = true; ctl.abort(); clearInterval(timer); };
}

// ---- router ----

async function route() {
  if (current) { current(); current = null; }
  takeTokenFromHash();
  if (!token) { showLogin(); return; }
  $('#login').hidden = true;
  $('#view').hidden = false;
  $('#logout').hidden = false;
  const h = location.hash.replace(/^#/, '') || '/pipelines';
  const [path, query] = h.split('?');
  const params = new URLSearchParams(query || '');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  try {
    if (parts[0] === 'runs' && parts[1]) current = await runView(parts[1]);
    else if (parts[0] === 'runs') current = await runsView(params);
    else if (parts[0] === 'pipelines' && parts[1]) current = await pipelineView(parts[1]);
    else if (parts[0] === 'edit') current = await editView(parts[1]);
    else if (parts[0] === 'secrets') current = await secretsView();
    else current = await pipelinesView();
  } catch (err) {
    if (err.status !== 401) viewError(err);
  }
}

window.addEventListener('hashchange', route);
route();
