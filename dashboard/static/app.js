// The trainers' page. Every string from the trace is put on the page as text
// (textContent / createTextNode), never parsed as markup: an email's <script> stays text.
'use strict';

const MAX_CARDS_PER_COLUMN = 100;
const MAX_SYSTEM_LINES = 8;
const COLUMNS = ['reader', 'validator', 'actor'];
const SOURCE_LABEL = { model: 'from the model', recorded: 'recorded answer', none: 'no answer' };
const OUTCOME_LABEL = {
  completed: 'completed', rejected: 'rejected', refused: 'refused',
  escalated: 'waiting for a person', failed: 'failed',
};

const cards = new Map();
const naiveRuns = new Map();
let pageTask = '';  // the task the page was started with; a card run by another names its own

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
}

function argsText(args) {
  return Object.entries(args || {}).map(([k, v]) => k + '=' + v).join(', ');
}

function callItem(call, withStatus) {
  const item = el('li', 'call' + (call.outside_plan || call.repeated ? ' outside' : ''));
  item.appendChild(el('span', 'pair', call.server + '/' + call.tool));
  item.appendChild(document.createTextNode('(' + argsText(call.args) + ')'));
  if (withStatus && call.status && call.status !== 'ok') {
    item.appendChild(el('span', 'tag tag-' + call.status, call.status));
  }
  if (call.late) item.appendChild(el('span', 'tag tag-late', 'after the outcome'));
  if (call.outside_plan) item.appendChild(el('span', 'tag tag-outside', 'OUTSIDE THE PLAN'));
  if (call.repeated) item.appendChild(el('span', 'tag tag-outside', 'RAN TWICE'));
  if (call.replayed === true) item.appendChild(el('span', 'tag tag-replayed', 'ran before, not again'));
  if (call.student) item.appendChild(studentBadge(call.student));
  if (call.error) item.appendChild(el('div', 'small', call.error));
  return item;
}

// A lab's step that ran the student's code: small, but where the student looks for it.
function studentBadge(point) {
  const badge = el('span', 'tag tag-student', 'student code');
  badge.title = 'decided by the student\'s code plugged in at ' + point;
  return badge;
}

function row(label, className) {
  const line = el('div', 'row ' + (className || ''));
  line.appendChild(el('span', 'row-label', label));
  return line;
}

function renderCard(card) {
  const node = el('article', 'card');
  node.dataset.id = card.id;
  node.dataset.at = card.at;
  if (card.outcome) node.classList.add('outcome-' + card.outcome);
  node.title = (card.events || []).map((e) => e.stage + ' ' + e.event).join(' → ');

  const head = el('div', 'card-head');
  head.appendChild(el('span', 'subject', card.subject || (card.excerpt ? '(no subject)' : 'email received')));
  if (card.outcome) head.appendChild(el('span', 'badge badge-' + card.outcome, OUTCOME_LABEL[card.outcome]));
  node.appendChild(head);

  const meta = el('div', 'meta');
  meta.appendChild(el('span', 'id', card.id));
  if (card.sender) meta.appendChild(el('span', 'sender', card.sender));
  if (card.task && card.task !== pageTask) meta.appendChild(el('span', 'task', 'task ' + card.task));
  node.appendChild(meta);

  if (card.excerpt) node.appendChild(el('pre', 'excerpt', card.excerpt));

  if (card.unreadable) {
    const line = row('reader', 'bad');
    line.appendChild(el('span', 'rule', card.unreadable.rule));
    line.appendChild(document.createTextNode(' ' + card.unreadable.reason));
    node.appendChild(line);
  }
  if (card.source) {
    const line = row('answer');
    line.appendChild(el('code', 'answer', card.answer === '' ? '(empty)' : card.answer));
    line.appendChild(el('span', 'source source-' + card.source, SOURCE_LABEL[card.source] || card.source));
    node.appendChild(line);
    if (card.model_error && card.source !== 'model') node.appendChild(el('div', 'small', 'model: ' + card.model_error));
  }
  if (card.verdict) {
    const passed = card.verdict.verdict === 'passed';
    const line = row('validator', passed ? 'good' : 'bad');
    line.appendChild(el('span', 'verdict', passed ? 'passed ' + card.verdict.value : 'rejected'));
    if (!passed) {
      line.appendChild(el('span', 'rule', card.verdict.rule));
      line.appendChild(document.createTextNode(' ' + card.verdict.reason));
    }
    if (card.verdict.student) line.appendChild(studentBadge(card.verdict.student));
    node.appendChild(line);
  }
  if (card.calls.length) {
    const list = el('ul', 'calls');
    card.calls.forEach((call) => list.appendChild(callItem(call, true)));
    node.appendChild(list);
  }
  card.refusals.forEach((refusal) => {
    const escalated = refusal.verdict === 'escalate';
    const line = row(escalated ? 'needs a person' : 'refused', escalated ? 'wait' : 'refusal');
    line.appendChild(el('span', 'pair', 'step ' + refusal.step + ' ' + refusal.server + '/' + refusal.tool));
    if (refusal.refused_by && !escalated) line.appendChild(el('span', 'rule', refusal.refused_by));
    if (refusal.escalated_to) line.appendChild(el('span', 'rule', refusal.escalated_to));
    if (refusal.student) line.appendChild(studentBadge(refusal.student));
    line.appendChild(document.createTextNode(' ' + refusal.reason));
    node.appendChild(line);
  });
  card.decisions.forEach((d) => {
    node.appendChild(el('div', 'row ' + (d.approve ? 'good' : 'bad'),
      (d.approve ? 'approved by ' : 'denied by ') + d.by + ' (' + d.role + ')'));
  });
  const told = [card.verdict && card.verdict.reason, card.unreadable && card.unreadable.reason]
    .concat(card.refusals.map((r) => r.reason)).filter(Boolean);
  if (card.outcome && card.reason && card.outcome !== 'completed' && !told.some((t) => card.reason.endsWith(t))) {
    node.appendChild(el('div', 'reason', card.reason));
  }
  return node;
}

function place(node, column) {
  const box = document.querySelector('#col-' + column + ' .cards');
  let before = null;
  for (const other of box.children) {
    if (other.dataset.at < node.dataset.at) { before = other; break; }
  }
  box.insertBefore(node, before);
  while (box.children.length > MAX_CARDS_PER_COLUMN) box.removeChild(box.lastChild);
}

function upsertCard(card, animate) {
  const old = document.querySelector('.card[data-id="' + CSS.escape(card.id) + '"]');
  const node = renderCard(card);
  const previous = cards.get(card.id);
  cards.set(card.id, card);
  if (old && previous && previous.column === card.column) {
    old.replaceWith(node);
  } else {
    if (old) old.remove();
    place(node, COLUMNS.includes(card.column) ? card.column : 'reader');
    if (animate) node.classList.add('arrived');
  }
}

function renderQueue() {
  const list = document.getElementById('queue-list');
  clear(list);
  const waiting = [...cards.values()].filter((c) => c.waiting);
  document.getElementById('queue-count').textContent = String(waiting.length);
  if (!waiting.length) list.appendChild(el('li', 'empty', 'nobody is waiting'));
  waiting.forEach((card) => {
    const item = el('li', 'queued');
    item.appendChild(el('span', 'subject', card.subject || '(no subject)'));
    item.appendChild(el('span', 'id', card.id));
    const step = card.refusals.filter((r) => r.verdict === 'escalate').pop();
    if (step) {
      item.title = step.server + '/' + step.tool + ' needs a ' + step.escalated_to + ': ' + step.reason;
      item.appendChild(el('code', 'hint-cmd', 'airlock approve ' + card.id + ' --as ' + step.escalated_to + ' --by NAME'));
    }
    list.appendChild(item);
  });
}

function setCounters(counters) {
  document.querySelectorAll('.counters .counter').forEach((box) => {
    const value = counters[box.dataset.key] || 0;
    box.querySelector('.n').textContent = String(value);
    // Both mean an invariant broke: red from across the room, never a number to squint at.
    if (box.dataset.key === 'outside_plan' || box.dataset.key === 'ran_twice') box.classList.toggle('alarm', value > 0);
  });
}

// The naive pane's own counters: emails it ran, calls it made, and those outside the plan.
function setNaiveCounters(counters) {
  document.querySelectorAll('.naive-counters .counter').forEach((box) => {
    const value = (counters || {})[box.dataset.naiveKey] || 0;
    box.querySelector('.n').textContent = String(value);
    if (box.dataset.naiveKey === 'outside_plan') box.classList.toggle('alarm', value > 0);
  });
}

// Whether the naive pane is on, and over HTTP which model the naive service has and why.
function renderNaivePane(naive) {
  const status = document.getElementById('naive-status');
  const why = document.getElementById('naive-why');
  why.textContent = '';
  status.classList.toggle('off', !naive.enabled);
  if (!naive.enabled) {
    status.textContent = naive.reason;
    return;
  }
  const sent = 'on: every email injected from this page also goes to the naive agent';
  if (naive.via !== 'service') {
    status.textContent = sent + ', with the same model prompt and tools';
  } else if (!naive.about) {
    status.textContent = sent + ' (its service has not said yet which model it has)';
  } else {
    status.textContent = sent + '. Its model: ' + naive.about.model;
    why.textContent = naive.about.why;
  }
}

// The whole corpus, measured on the real model (demo/measured.json): the figures behind the
// few emails played live. Text only, as everything the page shows.
function renderMeasured(found) {
  const line = document.getElementById('naive-measured');
  line.textContent = '';
  if (!found) return;
  if (found.error) {
    line.textContent = 'measured figures not shown: ' + found.error;
    return;
  }
  const naive = found.naive;
  const airlock = found.airlock;
  const grammar = found.naive_constrained ? 'its calls held to a grammar' : 'unconstrained';
  line.appendChild(el('strong', '', 'Measured on ' + found.corpus.join(' ') + ' with ' + found.model + ': '));
  line.appendChild(document.createTextNode(
    'of ' + naive.call_goals + ' emails that ask for a call outside the plan, the naive agent (' + grammar
    + ') made that call on ' + naive.call_goals_reached + ', airlock on ' + airlock.call_goals_reached
    + '; calls outside the plan: ' + naive.calls_outside_plan + ' against ' + airlock.calls_outside_plan + '. '));
  line.appendChild(el('code', '', found.command));
}

function systemLine(entry) {
  const list = document.getElementById('system');
  const item = el('li');
  item.appendChild(el('span', 'time', (entry.at || '').slice(11, 19)));
  item.appendChild(el('span', 'stage', entry.stage));
  item.appendChild(el('span', 'event', entry.event));
  item.appendChild(document.createTextNode(' ' + (entry.detail || '')));
  list.insertBefore(item, list.firstChild);
  while (list.children.length > MAX_SYSTEM_LINES) list.removeChild(list.lastChild);
}

function renderNaiveRun(run) {
  const node = el('article', 'naive-run status-' + run.status);
  node.dataset.id = run.id;
  const head = el('div', 'card-head');
  head.appendChild(el('span', 'subject', run.label || run.id));
  const injected = run.outside_plan > 0;
  head.appendChild(el('span', 'badge badge-naive-' + (injected ? 'injected' : run.status),
    injected ? 'injected call ran' : run.status === 'done' ? (run.outcome || 'done') : run.status));
  node.appendChild(head);
  node.appendChild(el('div', 'meta', 'same email as ' + run.id));
  if (run.calls.length) {
    const list = el('ul', 'calls');
    run.calls.forEach((call) => list.appendChild(callItem(call, false)));
    node.appendChild(list);
  } else if (run.status === 'done') {
    node.appendChild(el('div', 'small', 'no tool call ran'));
  }
  if (run.answer) {
    const line = row('model said');
    line.appendChild(el('code', 'answer', run.answer));
    node.appendChild(line);
  }
  if (run.reason && run.status !== 'done') node.appendChild(el('div', 'reason', run.reason));
  return node;
}

function upsertNaive(run) {
  naiveRuns.set(run.id, run);
  const box = document.getElementById('naive-runs');
  const old = box.querySelector('.naive-run[data-id="' + CSS.escape(run.id) + '"]');
  const node = renderNaiveRun(run);
  if (old) old.replaceWith(node); else box.insertBefore(node, box.firstChild);
}

function applySnapshot(snap) {
  cards.clear();
  naiveRuns.clear();
  document.querySelectorAll('.cards').forEach(clear);
  clear(document.getElementById('naive-runs'));
  clear(document.getElementById('system'));
  pageTask = snap.task || '';
  document.getElementById('plan').textContent = (pageTask ? pageTask + ': ' : '') + snap.plan.join('  →  ');
  snap.cards.forEach((card) => upsertCard(card, false));
  snap.naive_runs.forEach(upsertNaive);
  snap.system.forEach(systemLine);
  // The snapshot holds what fits in one page's byte budget: say what it left out.
  const left = snap.left_out || {};
  const omitted = Object.keys(left).filter((name) => left[name] > 0).map((name) => left[name] + ' ' + name);
  if (omitted.length) {
    systemLine({ stage: 'page', event: 'snapshot', detail: 'older items not sent (page budget): ' + omitted.join(', ') });
  }
  setCounters(snap.counters);
  setNaiveCounters(snap.naive_counters);
  renderQueue();
  renderNaivePane(snap.naive);
  renderMeasured(snap.measured);
  renderSamples(snap.samples);
  document.dispatchEvent(new CustomEvent('airlock:snapshot', { detail: snap }));
}

// The ready emails, one row per language (the server sends them in order); a hostile one
// is marked, and its label says what it tries.
function renderSamples(list) {
  const samples = document.getElementById('samples');
  clear(samples);
  if (!list.length) samples.appendChild(el('span', 'small', 'none here (no ready emails in this image)'));
  let row = null;
  let lang = null;
  list.forEach((sample) => {
    if (row === null || sample.lang !== lang) {
      lang = sample.lang;
      row = el('div', 'sample-row');
      if (lang) row.appendChild(el('span', 'lang-tag', lang.toUpperCase()));
      samples.appendChild(row);
    }
    const hostile = sample.category && sample.category !== 'benign';
    const button = el('button', 'sample' + (hostile ? ' sample-hostile' : ''), sample.label);
    button.type = 'button';
    button.title = sample.name + (sample.category ? ' · ' + sample.category : '');
    button.dataset.sample = sample.name;
    button.addEventListener('click', () => inject({ sample: sample.name }));
    row.appendChild(button);
  });
}

async function inject(body) {
  const status = document.getElementById('inject-status');
  status.textContent = 'sending…';
  status.className = 'inject-status';
  try {
    const response = await fetch('/api/inject', {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
    });
    const answer = await response.json();
    if (!response.ok) throw new Error(answer.error || response.statusText);
    status.textContent = 'sent as ' + answer.id + (answer.naive ? ' (also to the naive agent)' : '');
    status.dataset.id = answer.id;
    status.classList.add('ok');
  } catch (error) {
    status.textContent = 'not sent: ' + error.message;
    status.classList.add('error');
  }
}

function connect() {
  const conn = document.getElementById('conn');
  const source = new EventSource('/events');
  source.addEventListener('open', () => { conn.textContent = 'live'; conn.className = 'conn conn-live'; });
  source.addEventListener('error', () => {
    conn.textContent = 'reconnecting…'; conn.className = 'conn conn-wait';
    // A refused stream (503: too many open) is not retried by the browser itself.
    if (source.readyState === EventSource.CLOSED) setTimeout(connect, 5000);
  });
  source.addEventListener('snapshot', (e) => applySnapshot(JSON.parse(e.data)));
  source.addEventListener('card', (e) => {
    const update = JSON.parse(e.data);
    upsertCard(update.card, true);
    setCounters(update.counters);
    renderQueue();
    document.dispatchEvent(new CustomEvent('airlock:card', { detail: update.card }));
  });
  source.addEventListener('naive', (e) => {
    const update = JSON.parse(e.data);
    upsertNaive(update.run);
    setNaiveCounters(update.counters);
    document.dispatchEvent(new CustomEvent('airlock:naive', { detail: update.run }));
  });
  source.addEventListener('naive_pane', (e) => renderNaivePane(JSON.parse(e.data)));
  source.addEventListener('system', (e) => systemLine(JSON.parse(e.data)));
}

document.addEventListener('DOMContentLoaded', () => {
  document.getElementById('send').addEventListener('click', () => {
    const text = document.getElementById('text').value;
    if (text.trim()) inject({ text });
  });
  connect();
});
