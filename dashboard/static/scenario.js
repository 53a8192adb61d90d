// The guided scenario's player: one step at a time, at the trainer's pace. It reads
// GET /api/scenario, injects each step's email through POST /api/inject, and follows the
// step's card through the events app.js passes on (airlock:snapshot, airlock:card,
// airlock:naive). Its place is kept in localStorage: the page reloads, and the dashboard
// restarts when the stack's task is switched. Every string from the scenario file or an
// email is put on the page as text (textContent), never parsed as markup.
'use strict';

// el() and clear() are app.js's, loaded before this file (both deferred, in order).
(function () {
  const PLACE_KEY = 'airlock.scenario.place';
  const LANG_KEY = 'airlock.scenario.lang';
  const LANGUAGE_NAMES = { en: 'English', nl: 'Nederlands', de: 'Deutsch', ru: 'Русский', tr: 'Türkçe' };
  const OUTCOME_TEXT = {
    completed: 'completed', rejected: 'rejected', refused: 'refused',
    escalated: 'waiting for a person', failed: 'failed',
  };

  let scenario = null;       // the decoded scenario, or null
  let pageTask = null;       // the task the page runs, from the latest snapshot; null before one
  let sending = false;
  let sendError = '';
  const cards = new Map();   // message id -> the latest card
  const naiveRuns = new Map();
  let place = { key: '', playing: false, index: 0, sent: {} };

  let picked = null;  // the language picked on this page; else the one stored; else English

  function language() {
    let chosen = picked;
    if (chosen === null) {
      try { chosen = localStorage.getItem(LANG_KEY); } catch (error) { /* no storage: English */ }
    }
    return chosen && LANGUAGE_NAMES[chosen] ? chosen : 'en';
  }

  // One text in the trainer's language, English where the file has none in it.
  function tr(text) {
    if (!text) return '';
    const value = text[language()];
    return value === null || value === undefined ? text.en : value;
  }

  // A scenario edited since the place was saved starts again from its first step.
  function fingerprint(s) {
    return JSON.stringify(s.steps.map((step) => [step.email, step.task, step.outcome]));
  }

  function loadPlace() {
    try {
      const saved = JSON.parse(localStorage.getItem(PLACE_KEY) || 'null');
      if (saved && saved.key === fingerprint(scenario) && Number.isInteger(saved.index)) {
        place = { key: saved.key, playing: !!saved.playing, index: saved.index, sent: saved.sent || {} };
        return;
      }
    } catch (error) { /* an unreadable place starts again */ }
    place = { key: fingerprint(scenario), playing: false, index: 0, sent: {} };
  }

  function savePlace() {
    try {
      localStorage.setItem(PLACE_KEY, JSON.stringify(place));
    } catch (error) { /* no storage here: the place lasts until the page reloads */ }
  }

  function currentStep() {
    return place.playing && scenario && place.index < scenario.steps.length ? scenario.steps[place.index] : null;
  }

  function play() {
    place = { key: fingerprint(scenario), playing: true, index: 0, sent: {} };
    sendError = '';
    savePlace();
    render();
    sendIfReady();
  }

  function next() {
    place.index += 1;
    sendError = '';
    if (place.index >= scenario.steps.length) place.playing = false;
    savePlace();
    render();
    sendIfReady();
  }

  function stop() {
    place.playing = false;
    place.index = 0;
    place.sent = {};
    savePlace();
    render();
  }

  // The step's email goes once, when the page runs the step's task; "send again" resends.
  function sendIfReady(force) {
    const step = currentStep();
    if (!step || sending || (place.sent[place.index] && !force)) return;
    if (!force && (pageTask === null || pageTask !== step.task)) return;
    send(step, place.index);
  }

  async function send(step, index) {
    sending = true;
    sendError = '';
    render();
    try {
      const response = await fetch('/api/inject', {
        method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ sample: step.sample }),
      });
      const answer = await response.json();
      if (!response.ok) throw new Error(answer.error || response.statusText);
      place.sent[index] = answer.id;
      savePlace();
    } catch (error) {
      sendError = error.message;
    } finally {
      sending = false;
      render();
    }
  }

  function line(label, value, className) {
    const row = el('div', 'scenario-line ' + (className || ''));
    row.appendChild(el('span', 'scenario-key', label));
    if (value === undefined) return row;
    row.appendChild(document.createTextNode(' '));  // copied or read aloud, label and value stay apart
    row.appendChild(typeof value === 'string' ? el('span', 'scenario-value', value) : value);
    return row;
  }

  function command(text) {
    const code = el('code', 'scenario-cmd', text);
    code.title = 'copy and run it where the compose file is';
    return code;
  }

  function renderOutcome(box, step, id) {
    const card = cards.get(id);
    if (!card || !card.outcome) {
      box.appendChild(line('airlock', 'on its way…', 'pending'));
    } else {
      const decided = (card.decisions || []).filter((d) => d.by);
      const expected = card.outcome === step.outcome || (step.approve && decided.length > 0);
      const shown = el('span', 'badge badge-' + card.outcome, OUTCOME_TEXT[card.outcome] || card.outcome);
      const row = line('airlock', shown, expected ? 'good' : 'bad');
      row.appendChild(document.createTextNode(expected ? ' as expected'
        : ' (the scenario expects: ' + (OUTCOME_TEXT[step.outcome] || step.outcome) + ')'));
      box.appendChild(row);
      if (card.reason && card.outcome !== 'completed') box.appendChild(el('div', 'small', card.reason));
      decided.forEach((d) => box.appendChild(line('decided',
        (d.approve ? 'approved by ' : 'denied by ') + d.by + ' (' + d.role + ')', d.approve ? 'good' : 'bad')));
    }
    const run = naiveRuns.get(id);
    if (run) {
      const injected = (run.outside_plan || 0) > 0;
      box.appendChild(line('naive agent', injected ? 'a call outside its plan ran' : (run.outcome || run.status),
        injected ? 'bad' : ''));
    }
    if (step.commands.approve && card && card.waiting) {
      const row = line('approve', undefined, 'wait');
      row.appendChild(document.createTextNode(step.approve.by + ' (' + step.approve.role + ') runs: '));
      row.appendChild(command(step.commands.approve.split('{id}').join(id)));
      box.appendChild(row);
    }
  }

  function render() {
    const playButton = document.getElementById('scenario-play');
    const box = document.getElementById('scenario-step');
    if (!scenario) return;
    document.getElementById('scenario-title').textContent = tr(scenario.title);
    playButton.disabled = false;
    playButton.textContent = place.playing ? 'Play again from the start' : 'Play the scenario';
    clear(box);
    const step = currentStep();
    document.body.classList.toggle('scenario-playing', step !== null);
    if (!step) {
      box.hidden = !(place.index >= scenario.steps.length && place.key);
      if (!box.hidden) box.appendChild(el('p', 'small', 'The scenario is over: ' + scenario.steps.length + ' steps.'));
      return;
    }
    box.hidden = false;
    box.dataset.step = String(step.number);

    const head = el('h3', 'scenario-step-title');
    head.appendChild(el('span', 'scenario-count', 'Step ' + step.number + ' of ' + scenario.steps.length));
    head.appendChild(document.createTextNode(' ' + tr(step.title)));
    box.appendChild(head);

    const body = el('div', 'scenario-body');
    const left = el('div', 'scenario-email');
    const email = line('email', step.label);
    email.appendChild(el('code', 'scenario-file', step.email));
    left.appendChild(email);
    left.appendChild(line('task', step.task));

    const id = place.sent[place.index];
    if (!id && pageTask !== step.task) {
      const wait = el('div', 'scenario-switch');
      wait.appendChild(el('div', '', 'This step needs the task ' + step.task + '; the page runs '
        + (pageTask === null ? '(not known yet)' : pageTask || '(an unnamed task)')
        + '. Switch the stack, and the page sends the email once it runs ' + step.task + ':'));
      wait.appendChild(command(step.commands.switch));
      left.appendChild(wait);
    }
    if (id) left.appendChild(line('sent as', id));
    if (sending) left.appendChild(line('sending', '…'));
    if (sendError) left.appendChild(line('not sent', sendError, 'bad'));
    if (id) renderOutcome(left, step, id);
    body.appendChild(left);

    const notes = el('div', 'scenario-notes');
    notes.appendChild(el('div', 'scenario-key', 'what to look at'));
    const list = el('ul', 'scenario-look');
    tr(step.look).forEach((text) => list.appendChild(el('li', '', text)));
    notes.appendChild(list);
    notes.appendChild(line('counters', tr(step.counters)));
    body.appendChild(notes);
    box.appendChild(body);

    const buttons = el('div', 'scenario-buttons');
    const again = el('button', '', id || sendError ? 'Send again' : pageTask === step.task ? 'Send now' : 'Send anyway');
    again.type = 'button';
    again.id = 'scenario-send';
    again.disabled = sending;
    again.addEventListener('click', () => sendIfReady(true));
    const onward = el('button', 'send', place.index + 1 < scenario.steps.length ? 'Next step' : 'Finish');
    onward.type = 'button';
    onward.id = 'scenario-next';
    onward.addEventListener('click', next);
    const end = el('button', '', 'Stop');
    end.type = 'button';
    end.addEventListener('click', stop);
    buttons.append(again, onward, end);
    box.appendChild(buttons);
  }

  function showError(message) {
    const node = document.getElementById('scenario-error');
    node.textContent = message;
    node.hidden = false;
    document.getElementById('scenario-play').disabled = true;
  }

  function fillLanguages(codes) {
    const select = document.getElementById('scenario-lang');
    clear(select);
    codes.forEach((code) => {
      const option = el('option', '', LANGUAGE_NAMES[code] || code);
      option.value = code;
      select.appendChild(option);
    });
    select.value = language();
    select.addEventListener('change', () => {
      picked = select.value;
      try { localStorage.setItem(LANG_KEY, picked); } catch (error) { /* kept for this page only */ }
      render();
    });
  }

  async function start() {
    document.getElementById('scenario-play').addEventListener('click', play);
    document.addEventListener('airlock:snapshot', (e) => {
      pageTask = e.detail.task || '';
      cards.clear();
      naiveRuns.clear();
      (e.detail.cards || []).forEach((card) => cards.set(card.id, card));
      (e.detail.naive_runs || []).forEach((run) => naiveRuns.set(run.id, run));
      render();
      sendIfReady();
    });
    document.addEventListener('airlock:card', (e) => {
      cards.set(e.detail.id, e.detail);
      if (Object.values(place.sent).includes(e.detail.id)) render();
    });
    document.addEventListener('airlock:naive', (e) => {
      naiveRuns.set(e.detail.id, e.detail);
      if (Object.values(place.sent).includes(e.detail.id)) render();
    });
    let answer;
    try {
      const response = await fetch('/api/scenario', { cache: 'no-store' });
      answer = await response.json();
      if (!response.ok) throw new Error(answer.error || response.statusText);
    } catch (error) {
      showError('No scenario to play: ' + error.message);
      return;
    }
    scenario = answer;
    fillLanguages(scenario.languages || ['en']);
    loadPlace();
    render();
    sendIfReady();
  }

  document.addEventListener('DOMContentLoaded', start);
}());
