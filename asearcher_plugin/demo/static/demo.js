// asearcher demo page: one WebSocket to the server; every text is inserted as text, never as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
const runs = new Map();     // run id -> card state
const pending = new Map();  // request ref -> question (until accepted or rejected)
let socket = null;
let nextRef = 1;
let metricNotes = {};

// The launch's token, from the URL the server printed (#token=..., or ?token=...). Kept in this tab's
// sessionStorage, which no other origin (another port of this machine included) can read, and sent as a header,
// never as a cookie: a browser sends a cookie for 127.0.0.1 to every port of it.
const TOKEN = (() => {
  const found = new URLSearchParams(location.hash.slice(1)).get("token") || new URLSearchParams(location.search).get("token");
  if (found) {
    sessionStorage.setItem("asearcher-demo-token", found);
    history.replaceState(null, "", "/");  // out of the address bar, the history and screen shares
  }
  return sessionStorage.getItem("asearcher-demo-token") || "";
})();

function api(path, options = {}) {
  return fetch(path, { ...options, headers: { ...(options.headers || {}), Authorization: `token ${TOKEN}` } });
}

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

// ---------- options ----------
async function loadOptions() {
  const res = await api("/api/options");
  if (res.status === 403) {
    $("conn").textContent = "this page needs the demo's token: open the URL `asearcher demo` printed";
    $("conn").className = "conn down";
    return;
  }
  const opts = await res.json();
  metricNotes = opts.metric_notes || {};
  const kind = $("model-kind");
  for (const m of opts.models) {
    const o = el("option", null, m.label);
    o.value = m.kind;
    kind.appendChild(o);
  }
  kind.addEventListener("change", showModelFields);
  showModelFields();
  for (const t of opts.agent_types) {
    const o = el("option", null, t);
    o.value = t;
    if (t === "asearcher") o.selected = true;
    $("agent-type").appendChild(o);
  }
  // Only servers given at launch: the page picks among them, it cannot name another.
  for (const url of opts.kb_urls) $("kb-url").appendChild(Object.assign(el("option", null, url), { value: url }));
  for (const url of opts.model_urls) $("model-url").appendChild(Object.assign(el("option", null, url), { value: url }));
  $("model-url-none").hidden = opts.model_urls.length > 0;
  const keys = Object.entries(opts.web_keys).map(([k, set]) => `${k} ${set ? "set" : "not set"}`);
  $("web-keys").textContent = "web backend: " + keys.join(", ") + " in the server's environment";
}

function showModelFields() {
  const kind = $("model-kind").value;
  for (const div of document.querySelectorAll(".when")) div.classList.toggle("on", div.dataset.kind === kind);
}

// ---------- socket ----------
function connect() {
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  // a page cannot give a WebSocket handshake a header: the token goes as a subprotocol the server never echoes
  socket = new WebSocket(`${proto}//${location.host}/ws`, ["asearcher-demo", `token.${TOKEN}`]);
  socket.onopen = () => { $("conn").textContent = "connected"; $("conn").className = "conn ok"; };
  socket.onclose = () => {
    $("conn").textContent = "disconnected: reload the page";
    $("conn").className = "conn down";
    for (const card of runs.values()) {
      if (card.status === "running" || card.status === "preparing") {
        setStatus(card, "stopped");
        card.wait.remove();
        card.body.appendChild(el("div", "err", "connection to the server lost: the server stopped this run"));
      }
    }
  };
  socket.onmessage = (msg) => onEvent(JSON.parse(msg.data));
}

function send(obj) {
  if (!socket || socket.readyState !== WebSocket.OPEN) {
    $("form-error").textContent = "not connected to the server: reload the page";
    return false;
  }
  socket.send(JSON.stringify(obj));
  return true;
}

// ---------- asking ----------
function request() {
  const backend = document.querySelector("input[name=backend]:checked").value;
  return {
    question: $("question").value,
    gold: $("gold").value,
    model: {
      kind: $("model-kind").value,
      path: $("model-path").value,
      url: $("model-url").value,
      name: $("model-name").value || "default",
      tokenizer: $("model-tokenizer").value,
    },
    tools: { backend, kb_url: backend === "local" ? $("kb-url").value : "" },
    agent_type: $("agent-type").value,
    max_turns: Number($("max-turns").value),
    max_new_tokens_per_turn: Number($("max-tokens").value),
    temperature: Number($("temperature").value),
    seed: Number($("seed").value),
  };
}

$("form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  $("form-error").textContent = "";
  const req = request();
  const ref = nextRef++;
  pending.set(ref, req);
  send({ op: "start", ref, request: req });
});

function onEvent(ev) {
  if (ev.type === "accepted") {
    const req = pending.get(ev.ref);
    pending.delete(ev.ref);
    runs.set(ev.run, liveCard(ev.run, req));
    return;
  }
  if (ev.type === "rejected") {
    pending.delete(ev.ref);
    $("form-error").textContent = ev.error;
    return;
  }
  const card = runs.get(ev.run);
  if (!card) return;
  card.events.push(ev);
  if (ev.type === "status" || ev.type === "notice") {
    card.statusLine.textContent = ev.text;
    card.statusLine.classList.toggle("note", ev.type === "notice");
  } else if (ev.type === "started") {
    setStatus(card, "running");
    card.meta.textContent = `${ev.model} · ${ev.agent_type} agent · ${ev.tools}`;
    card.statusLine.textContent = "";
    waitFor(card, 1);
  } else if (ev.type === "turn") {
    card.turns.appendChild(turnElement(ev));
    if (!ev.done) waitFor(card, ev.turn + 1);
  } else if (ev.type === "finished") {
    card.wait.remove();
    setStatus(card, "finished");
    card.body.appendChild(resultElement(ev));
    card.save.hidden = false;
    card.reopen.hidden = false;
  } else if (ev.type === "stopped" || ev.type === "error") {
    card.wait.remove();
    setStatus(card, ev.type);
    card.body.appendChild(el("div", "err", ev.text));
  }
  if (card.status !== "running" && card.status !== "preparing") card.stop.disabled = true;
}

function waitFor(card, n) {
  card.wait.textContent = `turn ${n}: the model is writing`;
  card.turns.after(card.wait);
}

function setStatus(card, status) {
  card.status = status;
  card.node.dataset.status = status;
  card.pill.textContent = status;
  card.pill.className = "pill " + status;
}

function cardFrame(id, title) {
  const node = el("article", "run");
  node.id = id;
  const head = el("div", "run-head");
  const pill = el("span", "pill");
  head.append(pill, el("span", "q", title));
  const meta = el("div", "run-meta");
  const statusLine = el("div", "status-line");
  const body = el("div", "run-body");
  const turns = el("ol", "turns");
  body.appendChild(turns);
  const close = el("button", "ghost", "close");
  close.type = "button";
  head.appendChild(close);
  node.append(head, meta, statusLine, body);
  $("runs").prepend(node);
  return { node, head, pill, meta, statusLine, body, turns, close };
}

function liveCard(runId, req) {
  const f = cardFrame("run-" + runId, req.question);
  const card = { ...f, id: runId, events: [], status: "preparing", wait: el("div", "waiting") };
  setStatus(card, "preparing");
  card.meta.textContent = "run " + runId;
  card.stop = el("button", "ghost", "stop");
  card.stop.type = "button";
  card.stop.className = "ghost stop";
  card.stop.onclick = () => send({ op: "stop", run: runId });
  card.save = el("a", "ghost", "save .jsonl");
  const line = `/api/runs/${encodeURIComponent(runId)}/line`;
  card.save.href = "#";
  card.save.download = `demo-${runId}.jsonl`;
  card.save.onclick = async (event) => {  // a link cannot carry the token's header: fetched, then saved
    event.preventDefault();
    const blob = await (await api(line)).blob();
    const link = Object.assign(document.createElement("a"), { href: URL.createObjectURL(blob), download: card.save.download });
    link.click();
    URL.revokeObjectURL(link.href);
  };
  card.save.hidden = true;
  card.reopen = el("button", "ghost reopen", "re-open saved line");
  card.reopen.type = "button";
  card.reopen.hidden = true;
  card.reopen.onclick = async () => {
    const res = await api(line);
    openReplay(await res.text(), `saved run ${runId}`);
  };
  f.close.onclick = () => {
    if (card.status === "running" || card.status === "preparing") send({ op: "stop", run: runId });
    card.node.remove();
  };
  f.head.insertBefore(card.stop, f.close);
  f.head.insertBefore(card.save, f.close);
  f.head.insertBefore(card.reopen, f.close);
  return card;
}

// ---------- a turn ----------
const ACTION_LABEL = {
  search: "search", access: "read page", answer: "answer", invalid: "no valid action", none: "cut off",
  tool_calls: "tool calls",
};

function reasoningOf(text) {
  return text
    .replace(/<(search|access|answer|tool_call)>[\s\S]*?<\/\1>/gi, "")
    .replace(/<\/?think>|<\|im_(start|end)\|>(assistant|user)?/gi, "")
    .trim();
}

function turnElement(t) {
  const li = el("li", "turn");
  li.dataset.turn = t.turn;
  li.dataset.action = t.action;
  const head = el("div", "turn-head");
  head.appendChild(el("span", "turn-n", `turn ${t.turn}`));
  const act = el("span", "act " + t.action, ACTION_LABEL[t.action] || t.action);
  head.appendChild(act);
  if (t.action === "invalid") head.appendChild(el("span", "arg", t.error));
  else if (t.action === "none") head.appendChild(el("span", "arg", "the token budget ran out mid-turn"));
  else if (t.action === "tool_calls") head.appendChild(el("span", "arg", (t.calls || []).map(callLabel).join(" · ")));
  else head.appendChild(el("span", "arg", t.argument));
  if (t.generate_seconds !== undefined) {
    head.appendChild(el("span", "secs", `model ${t.generate_seconds.toFixed(2)}s · tools ${t.step_seconds.toFixed(2)}s`));
  }
  li.appendChild(head);
  const thought = reasoningOf(t.text || "");
  if (thought) li.appendChild(el("div", "reasoning", thought));
  if (t.feedback) li.appendChild(feedbackElement(t));
  return li;
}

function callLabel(c) {
  return `${c.name}(${JSON.stringify(c.arguments)})`;
}

function feedbackElement(t) {
  const box = el("div", "feedback");
  if (t.calls && t.calls.length) {  // agent_type tool-calls: each call with its arguments, then its result
    for (const c of t.calls) {
      const p = el("div", "doc");
      p.appendChild(el("b", null, callLabel(c)));
      p.appendChild(el("pre", null, c.result));
      box.appendChild(p);
    }
    return box;
  }
  const raw = t.feedback.replace(/<\/?information>|<think>\s*$|<\|im_(start|end)\|>(assistant|user)?/g, "").trim();
  if (/^(search|access) failed:/m.test(raw)) {
    box.classList.add("failed");
    box.appendChild(el("pre", null, raw));
    return box;
  }
  // search results: one block per document, as the agent was shown them
  const docs = raw.split(/\n(?=Doc \d+\(Title: )|\n\n(?=\[Doc \d+\]\()/);
  if (t.action === "search" && docs.length >= 1 && /^(Doc 1\(Title: |\[Doc 1\]\()/.test(docs[0])) {
    for (const d of docs) {
      const m = d.match(/^(Doc \d+\(Title: [^\n]*?\)|\[Doc \d+\]\([^)\n]*\):)([\s\S]*)$/);
      const p = el("div", "doc");
      if (m) { p.appendChild(el("b", null, m[1])); p.appendChild(document.createTextNode(m[2])); }
      else p.textContent = d;
      box.appendChild(p);
    }
    return box;
  }
  box.appendChild(el("pre", null, raw));
  return box;
}

function resultElement(ev) {
  const box = el("div", "result");
  const a = el("div", "answer");
  a.appendChild(el("b", null, "answer: "));
  a.appendChild(document.createTextNode(ev.answer === null || ev.answer === undefined ? "(none)" : ev.answer));
  box.appendChild(a);
  const golds = ev.golds || ev.golden_answers || [];
  if (golds.length) box.appendChild(el("div", null, "gold: " + golds.join(" | ")));
  if (ev.scores) {
    const table = el("table", "scores");
    const hr = el("tr"), vr = el("tr");
    for (const [k, v] of Object.entries(ev.scores)) {
      const th = el("th", null, k);
      if (metricNotes[k]) th.title = metricNotes[k];
      hr.appendChild(th);
      vr.appendChild(el("td", null, Number(v).toFixed(3)));
    }
    if (ev.reward !== null && ev.reward !== undefined) {
      hr.appendChild(el("th", null, "reward"));
      vr.appendChild(el("td", null, Number(ev.reward).toFixed(3)));
    }
    table.append(hr, vr);
    box.appendChild(table);
    if (metricNotes.agree) box.appendChild(el("div", "hint", metricNotes.agree + " (hover a name for its meaning)"));
  }
  const s = ev.stats || {};
  box.appendChild(el("div", "hint",
    `${s.turns ?? 0} turns · ${s.searches ?? 0} searches · ${s.accesses ?? 0} pages read · ` +
    `${s.invalid_actions ?? 0} invalid actions · ${s.tool_errors ?? 0} tool errors` + (ev.truncated ? " · truncated" : "")));
  for (const n of ev.notes || []) box.appendChild(el("div", "note", n));
  return box;
}

// ---------- replay ----------
$("replay-file").addEventListener("change", async () => {
  const file = $("replay-file").files[0];
  if (!file) return;
  openReplay(await file.text(), file.name);
  $("replay-file").value = "";
});

async function openReplay(text, name) {
  $("replay-error").textContent = "";
  const res = await api("/api/replay", { method: "POST", body: text, headers: { "Content-Type": "text/plain" } });
  const data = await res.json();
  if (!res.ok) {
    $("replay-error").textContent = `${name}: ${data.error}`;
    return;
  }
  const f = cardFrame("replay-" + nextRef++, `replay: ${name}`);
  f.node.classList.add("replay");
  f.pill.textContent = "replay";
  f.pill.className = "pill";
  f.close.onclick = () => f.node.remove();
  f.meta.textContent = `${data.rows.length} trajectories` + (data.problems.length ? ` · skipped: ${data.problems.join("; ")}` : "");
  const list = el("div", "replay-list");
  f.body.before(list);
  // In question order (a file lists them in the order they finished), the one shown marked.
  const order = new Intl.Collator(undefined, { numeric: true });
  const rows = [...data.rows].sort((a, b) =>
    order.compare(a.dataset, b.dataset) || order.compare(a.id, b.id) || a.seed - b.seed);
  rows.forEach((row, i) => {
    const score = row.scores && row.scores.f1 !== undefined ? ` f1 ${Number(row.scores.f1).toFixed(2)}` : "";
    const b = el("button", "ghost pick", `${row.dataset}/${row.id} #${row.seed} ${row.status}${score}`);
    b.type = "button";
    b.onclick = () => {
      for (const other of list.children) other.setAttribute("aria-pressed", String(other === b));
      showReplay(f, row);
    };
    list.appendChild(b);
    if (i === 0) b.onclick();
  });
}

function showReplay(f, row) {
  f.body.replaceChildren();
  f.statusLine.textContent = row.question;
  if (row.status !== "ok") {
    f.body.appendChild(el("div", "err", `${row.status}: ${row.error}`));
    return;
  }
  if (row.prompt) {
    const d = el("details", "prompt");
    d.appendChild(el("summary", null, "prompt"));
    d.appendChild(el("pre", null, row.prompt));
    f.body.appendChild(d);
  }
  const nav = el("div", "replay-nav");
  const prev = el("button", "ghost prev", "◀ previous");
  const next = el("button", "ghost next", "next turn ▶");
  const all = el("button", "ghost all", "show all");
  const pos = el("span", "hint pos");
  nav.append(prev, next, all, pos);
  const turns = el("ol", "turns");
  const result = resultElement({ ...row, golds: row.golden_answers, notes: [] });
  f.body.append(nav, turns);
  let shown = 0;
  const render = () => {
    turns.replaceChildren(...row.turns.slice(0, shown).map(turnElement));
    pos.textContent = `${shown} of ${row.turns.length} turns`;
    prev.disabled = shown === 0;
    next.disabled = shown >= row.turns.length;
    if (shown >= row.turns.length) f.body.appendChild(result); else result.remove();
  };
  prev.onclick = () => { shown = Math.max(0, shown - 1); render(); };
  next.onclick = () => { shown = Math.min(row.turns.length, shown + 1); render(); };
  all.onclick = () => { shown = row.turns.length; render(); };
  render();
}

loadOptions().catch((e) => { $("form-error").textContent = "could not load the options: " + e; });
connect();
