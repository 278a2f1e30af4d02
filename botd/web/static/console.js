// botd's web page: four views over the page's API (botd/web/page.py), updated live by
// server-sent events. Every text that came from a user, a model or a platform is put in
// with textContent, never as HTML.
"use strict";

const HEADERS = { "X-Botd-Console": "1", "Content-Type": "application/json" };

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (className) node.className = className;
  return node;
}

function row(cells, className) {
  const tr = el("tr", null, className);
  for (const cell of cells) {
    const td = el("td");
    if (cell instanceof Node) td.appendChild(cell); else td.textContent = cell === null || cell === undefined ? "" : String(cell);
    tr.appendChild(td);
  }
  return tr;
}

function fill(id, nodes) {
  const box = document.getElementById(id);
  box.replaceChildren(...nodes);
}

function seconds(value) {
  if (value === null || value === undefined) return "";
  if (value < 60) return value.toFixed(1) + " s";
  if (value < 3600) return Math.round(value / 60) + " min";
  return (value / 3600).toFixed(1) + " h";
}

function when(at) {
  return at ? new Date(at * 1000).toLocaleString() : "";
}

function tokens(counts) {
  if (!counts) return "";
  const parts = [];
  for (const [kind, count] of Object.entries(counts)) if (count) parts.push(kind + " " + count);
  return parts.join(", ");
}

// -- views ------------------------------------------------------------------------------

const views = ["status", "conversations", "approvals", "chat"];

function show(view) {
  for (const name of views) document.getElementById(name).hidden = name !== view;
  for (const button of document.querySelectorAll("nav button")) {
    button.classList.toggle("current", button.dataset.view === view);
  }
  if (view === "chat") startChat();
}

// -- status -----------------------------------------------------------------------------

function showStatus(status) {
  const overall = document.getElementById("overall");
  overall.textContent = status.status === "ok" ? "All well." : "Something is not well: " + status.status;
  overall.className = "overall " + (status.status === "ok" ? "up" : "down");
  fill("problems", (status.problems || []).map((line) => el("li", line)));
  const errors = status.channel_errors || {};
  fill("channels", Object.entries(status.channels || {}).map(([name, state]) =>
    row([name, el("span", state === "running" ? "up" : "down (" + state + ")", state === "running" ? "up" : "down"), errors[name] || ""], "channel-" + name)));
  fill("components", Object.entries(status.components || {}).map(([name, state]) =>
    row([name, el("span", state.status, state.status === "ok" ? "up" : "down"), state.reason || ""])));
  const stats = status.stats || {};
  const labels = {
    runs_in_flight: "runs in flight", inbox_backlog: "inbox backlog",
    inbox_oldest_unanswered_seconds: "oldest unanswered", outbox_pending: "pieces waiting to be sent",
  };
  const items = [];
  for (const [key, label] of Object.entries(labels)) {
    if (!(key in stats)) continue;
    items.push(el("dt", label));
    items.push(el("dd", key.endsWith("_seconds") ? (seconds(stats[key]) || "none") : stats[key]));
  }
  fill("stats", items);
  const runs = status.runs || { in_flight: [], recent: [] };
  fill("in-flight", runs.in_flight.map((run) => row([run.conversation, seconds(run.seconds), tokens(run.tokens)], "run")));
  fill("recent", runs.recent.map((run) => row([run.conversation, run.stop_reason, seconds(run.seconds), tokens(run.tokens)])));
  const node = status.node || {};
  const about = [];
  for (const [key, value] of Object.entries({ ...status.botd, ...node })) {
    about.push(el("dt", key));
    if (key === "nodes" && Array.isArray(value)) {
      about.push(el("dd", value.map(describeNode).join("\n")));
    } else {
      about.push(el("dd", value !== null && typeof value === "object" ? JSON.stringify(value) : value));
    }
  }
  fill("node", about);
}

function describeNode(node) {
  if (node.state !== "up") return node.id + ": gone for " + seconds(node.seconds);
  const holds = (node.holds || []).join(", ");
  return node.id + ": up" + (holds ? ", holds " + holds : "") + ", " + (node.conversations || 0) + " conversation(s)";
}

// -- conversations ----------------------------------------------------------------------

let openKey = null;

function showConversations(list) {
  fill("conversation-list", list.map((c) => {
    const tr = row([c.channel, c.chat, when(c.last_activity), c.queue + (c.waiting ? " (" + c.waiting + " waiting)" : "")], "clickable");
    tr.addEventListener("click", () => openConversation(c.key));
    return tr;
  }));
  if (openKey !== null) openConversation(openKey);
}

async function openConversation(key) {
  openKey = key;
  const answer = await fetch("/api/conversations?key=" + encodeURIComponent(key));
  if (!answer.ok) return;
  const body = await answer.json();
  document.getElementById("transcript-box").hidden = false;
  document.getElementById("transcript-title").textContent = key;
  fill("transcript", body.pieces.map((piece) => {
    const li = el("li", piece.text, piece.by);
    const who = piece.by === "user" ? piece.sender : "botd";
    li.appendChild(el("span", who + " · " + when(piece.at) + " · " + piece.delivery, "meta"));
    return li;
  }));
}

// -- approvals --------------------------------------------------------------------------

const LABELS = { approve: "Approve", always: "Always allow here", deny: "Reject" };

function showApprovals(list) {
  document.getElementById("approval-count").textContent = list.length ? "(" + list.length + ")" : "";
  if (!list.length) {
    fill("approval-list", [el("li", "Nothing waits for a decision.", "note")]);
    return;
  }
  fill("approval-list", list.map((a) => {
    const li = el("li", null, "approval");
    li.appendChild(el("strong", a.tool));
    li.appendChild(el("span", " in " + a.conversation + ", expires " + when(a.deadline), "note"));
    li.appendChild(el("code", a.summary));
    for (const verb of a.verbs) {
      const button = el("button", LABELS[verb] || verb);
      button.type = "button";
      button.dataset.verb = verb;
      button.addEventListener("click", () => decide(a.token, verb));
      li.appendChild(button);
    }
    return li;
  }));
}

async function decide(token, verb) {
  const note = document.getElementById("approval-note");
  try {
    const answer = await fetch("/api/approvals/decide", {
      method: "POST", headers: HEADERS, body: JSON.stringify({ token, verb }),
    });
    const body = await answer.json();
    note.textContent = body.message || body.error || "";
  } catch (err) {
    note.textContent = "Not sent: " + err;
  }
}

// -- chat -------------------------------------------------------------------------------

let chatStarted = false;

function conversationId() {
  let id = localStorage.getItem("botd-conversation");
  if (!id || !/^[A-Za-z0-9_-]{8,64}$/.test(id)) {
    const bytes = new Uint8Array(16);
    crypto.getRandomValues(bytes);
    id = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
    localStorage.setItem("botd-conversation", id);
  }
  return id;
}

function chatMessage(message) {
  const log = document.getElementById("chat-log");
  let li = log.querySelector('[data-id="' + CSS.escape(String(message.id)) + '"]');
  if (!li) {
    li = el("li", null, message.role === "user" ? "user" : "bot");
    li.dataset.id = String(message.id);
    log.appendChild(li);
  }
  li.textContent = message.text;
  li.classList.toggle("final", Boolean(message.final));
}

async function startChat() {
  if (chatStarted) return;
  chatStarted = true;
  const about = await (await fetch("/api/about")).json();
  if (!about.chat) {
    document.getElementById("chat-off").hidden = false;
    return;
  }
  document.getElementById("chat-on").hidden = false;
  const id = conversationId();
  const answer = await fetch("/api/chat/messages?conversation=" + encodeURIComponent(id));
  if (answer.ok) for (const message of (await answer.json()).messages) chatMessage(message);
  const events = new EventSource("/api/chat/events?conversation=" + encodeURIComponent(id));
  events.addEventListener("message", (event) => chatMessage(JSON.parse(event.data)));
  events.addEventListener("delete", (event) => {
    const gone = JSON.parse(event.data);
    const li = document.getElementById("chat-log").querySelector('[data-id="' + CSS.escape(String(gone.id)) + '"]');
    if (li) li.remove();
  });
  document.getElementById("chat-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const box = document.getElementById("chat-text");
    const text = box.value;
    if (!text.trim()) return;
    const clientId = id + "-" + Date.now() + "-" + Math.random().toString(16).slice(2);
    const sent = await fetch("/api/chat/messages", {
      method: "POST", headers: HEADERS, body: JSON.stringify({ conversation: id, text, client_id: clientId }),
    });
    const problem = document.getElementById("chat-problem");
    if (sent.ok) {
      box.value = "";
      problem.textContent = "";
      chatMessage({ id: (await sent.json()).id, role: "user", text, final: true });
    } else {
      problem.textContent = "Not sent (" + sent.status + ")";
    }
  });
}

// -- live updates -----------------------------------------------------------------------

function listen() {
  const link = document.getElementById("link");
  const events = new EventSource("/api/events");
  events.addEventListener("open", () => { link.textContent = "live"; });
  events.addEventListener("error", () => { link.textContent = "reconnecting…"; });
  events.addEventListener("status", (event) => showStatus(JSON.parse(event.data)));
  events.addEventListener("conversations", (event) => showConversations(JSON.parse(event.data)));
  events.addEventListener("approvals", (event) => showApprovals(JSON.parse(event.data)));
}

document.addEventListener("DOMContentLoaded", () => {
  for (const button of document.querySelectorAll("nav button")) {
    button.addEventListener("click", () => show(button.dataset.view));
  }
  listen();
});
