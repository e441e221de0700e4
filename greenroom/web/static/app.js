// The chat page: sessions on the left, the open session's transcript and composer on the right.
// REST for short commands (api.js), one WebSocket for every live event (live.js), one reducer
// per open session (transcript.js). The open session's id is kept in the URL's fragment, so a
// reload comes back to it, and a turn started here keeps running through the reload.

import { api, ApiError, onUnauthorized, setToken, token } from "./api.js";
import {
  askContinuation,
  askDecision,
  askElicitation,
  askToolCall,
  askText,
  dismissDecision,
  dismissElicitation,
} from "./dialogs.js";
import { AgentPicker, agentLabel } from "./agents.js";
import { showInDoubt } from "./doubt.js";
import { el } from "./dom.js";
import { Live } from "./live.js";
import { SessionPages } from "./sessionpages.js";
import { Transcript } from "./transcript.js";

const $ = (id) => document.getElementById(id);
const STATE_TEXT = {
  connecting: "connecting…",
  live: "live",
  reconnecting: "reconnecting…",
  offline: "offline",
};

const page = {
  sessions: [],
  current: "", // the open session's id
  modelChoice: "", // a model picked for the next turn ("" = leave as is)
  pendingKey: "", // the request a dialog is open for
  connection: "connecting",
  hasRuntime: false, // the open session's runtime is built (its model picker can be asked)
  messages: 0, // messages shown in the open session
};

// --- token ---------------------------------------------------------------------------------

let tokenPrompt = null;

onUnauthorized((problem) => {
  if (!tokenPrompt) {
    tokenPrompt = askText({
      title: problem || "This server needs an access token",
      label: "Access token",
      type: "password",
      ok: "Continue",
    }).then((given) => {
      tokenPrompt = null;
      if (given) {
        setToken(given.trim());
        live.restart();
      }
      return given ? given.trim() : null;
    });
  }
  return tokenPrompt;
});

// --- live events ---------------------------------------------------------------------------

const live = new Live(
  () => (token() ? [`bearer.${token()}`] : []),
  (state) => {
    page.connection = state;
    const status = $("connection");
    status.dataset.state = state;
    status.textContent = STATE_TEXT[state] || state;
    $("send").disabled = state === "offline";
  },
);

const agents = new AgentPicker($("agent-picker"), $("agent-hint"), $("welcome"));

const transcript = new Transcript($("transcript"), {
  title: (title) => showTitle(title),
  usage: (usage) => showUsage(usage),
  running: (running, agent) => showRunning(running, agent),
  pending: (request) => onPending(request),
  finished: (text) => onFinished(text),
  gap: () => openSession(page.current),
  exited: () => onExited(),
  fork: (ordinal, text) => forkAt(ordinal, text),
  agentInfo: (info) => {
    $("run-state").textContent = `${info.agent_name} (${info.model}) is working…`;
  },
  inDoubt: () => loadInDoubt(page.current),
});

function showTitle(title) {
  $("session-title").textContent = title || "Untitled session";
  const entry = page.sessions.find((s) => s.id === page.current);
  if (entry && entry.title !== title) {
    entry.title = title;
    renderSessions();
  }
}

const count = (n) => Number(n || 0).toLocaleString("en");

function showUsage(usage) {
  const parts = [`Tokens: ${count(usage.input_tokens)} in, ${count(usage.output_tokens)} out`];
  // cost may be null (the model's price is unknown) or 0: then it is not shown.
  if (typeof usage.cost === "number" && usage.cost > 0) parts.push(`cost $${usage.cost.toFixed(4)}`);
  if (usage.context_limit > 0) {
    const used = usage.context_length || 0;
    const share = Math.round((100 * used) / usage.context_limit);
    parts.push(`context ${count(used)} / ${count(usage.context_limit)} (${share}%)`);
  }
  $("usage").textContent = parts.join(" · ");
}

function showRunning(running, agent) {
  $("queue").disabled = !running;
  $("cancel").disabled = !running;
  $("run-state").textContent = running ? `${agent || "The agent"} is working…` : "";
}

async function onFinished(text) {
  const reply = text.trim();
  $("announcer").textContent = reply ? `Reply finished: ${reply.slice(0, 300)}` : "Turn finished.";
  const id = page.current;
  page.hasRuntime = true;
  await refreshSessions();
  if (id !== page.current) return;
  const entry = page.sessions.find((s) => s.id === id);
  if (entry) agents.show(entry, page.messages);
  loadModels(id);
}

function onExited() {
  const gone = page.current;
  page.current = "";
  closeSessionView("This session was deleted.");
  pages.drop(gone);
  page.sessions = pages.sessions;
  renderSessions();
}

async function onPending(request) {
  if (!request) {
    page.pendingKey = "";
    dismissDecision();
    dismissElicitation();
    return;
  }
  const sessionId = page.current;
  if (request.type === "tool_call_confirmation") {
    const key = `tool:${(request.tool_call || {}).id}`;
    if (page.pendingKey === key) return;
    page.pendingKey = key;
    const decision = await askToolCall(request);
    if (page.pendingKey === key) page.pendingKey = "";
    if (!decision || sessionId !== page.current) return;
    await report(api.resume(sessionId, decision));
  } else if (request.type === "max_iterations_reached") {
    const key = `iterations:${request.session_id}:${request.max_iterations}`;
    if (page.pendingKey === key) return;
    page.pendingKey = key;
    const decision = await askContinuation(request);
    if (page.pendingKey === key) page.pendingKey = "";
    if (!decision || sessionId !== page.current) return;
    await report(api.resume(sessionId, decision));
  } else if (request.type === "elicitation_request") {
    const key = `elicit:${request.elicitation_id}`;
    if (page.pendingKey === key) return;
    page.pendingKey = key;
    const answer = await askElicitation(request);
    if (page.pendingKey === key) page.pendingKey = "";
    if (!answer || sessionId !== page.current) return;
    await report(
      api.elicitation(sessionId, { ...answer, elicitation_id: request.elicitation_id || "" }),
    );
  }
}

/** Await a command; show its failure in the transcript instead of throwing. */
async function report(promise) {
  try {
    return await promise;
  } catch (error) {
    showError(error);
    return undefined;
  }
}

function showError(error) {
  const text = error instanceof ApiError ? error.message : String(error.message || error);
  if (page.current) transcript.addNotice(`Could not do that: ${text}`, "error");
  // Also above the composer, where it is seen however long the transcript is.
  $("error-text").textContent = `Could not do that: ${text}`;
  $("error-banner").hidden = false;
  if (error && error.code === "needs_decision") loadInDoubt(page.current);
}

function clearError() {
  $("error-banner").hidden = true;
  $("error-text").textContent = "";
}

// --- sessions ------------------------------------------------------------------------------

// Pages of the list, searched on the server (titles and messages); "More sessions" adds a page.
const pages = new SessionPages(
  (query) => report(api.sessionPage(query)),
  () => {
    page.sessions = pages.sessions;
    renderSessions();
  },
);

async function refreshSessions() {
  await pages.reload();
}

function renderSessions() {
  const query = pages.query;
  const items = page.sessions.map((s) => {
    const label = s.title || "Untitled session";
    const when = new Date(s.created_at).toLocaleString();
    const button = el(
      "button",
      { type: "button", class: "session-link" },
      el("span", { class: "session-name" }, (s.starred ? "★ " : "") + label),
      el("span", { class: "session-meta" }, sessionMeta(s, when)),
    );
    if (s.id === page.current) button.setAttribute("aria-current", "page");
    button.addEventListener("click", () => openSession(s.id));
    return el("li", {}, button);
  });
  if (!items.length) {
    items.push(el("li", { class: "hint" }, query ? "No session matches." : "No sessions yet."));
  }
  if (pages.next) {
    const more = el("button", { type: "button", class: "more-sessions" }, "More sessions");
    more.addEventListener("click", () => pages.more());
    items.push(el("li", {}, more));
  }
  $("session-list").replaceChildren(...items);
}

function sessionMeta(s, when) {
  const n = s.num_messages || 0;
  const parts = [when, `${n} ${n === 1 ? "message" : "messages"}`];
  if (s.agent_file) parts.push(agentLabel(s.agent_file, s.agent_name));
  return parts.join(" · ");
}

async function newSession() {
  const session = await report(api.create());
  if (!session) return;
  await refreshSessions();
  await openSession(session.id);
  $("composer-input").focus();
}

async function openSession(id) {
  if (!id) return;
  showSessions(false);
  clearError();
  if (page.current && page.current !== id) live.unsubscribe(page.current);
  page.current = id;
  page.modelChoice = "";
  page.pendingKey = "";
  dismissDecision();
  dismissElicitation();
  history.replaceState(null, "", `#${encodeURIComponent(id)}`);
  let snapshot;
  try {
    snapshot = await api.snapshot(id);
  } catch (error) {
    if (page.current !== id) return;
    page.current = "";
    closeSessionView(error.status === 404 ? "That session does not exist." : error.message);
    return;
  }
  if (page.current !== id) return;
  $("empty-hint").hidden = true;
  $("composer").hidden = false;
  $("session-actions").hidden = false;
  const since = transcript.load(snapshot);
  page.messages = (snapshot.messages || []).length;
  page.hasRuntime = Boolean(snapshot.agent);
  const entry = page.sessions.find((s) => s.id === id);
  showStar(Boolean((entry && entry.starred) || snapshot.starred));
  agents.show(snapshot, page.messages);
  renderSessions();
  loadInDoubt(id);
  live.subscribe(id, since, {
    event: (seq, event) => {
      if (page.current === id) transcript.apply(seq, event);
    },
    exited: () => {
      if (page.current === id) onExited();
    },
    failed: (error) => showError(error),
  });
  loadModels(id);
}

function closeSessionView(message) {
  history.replaceState(null, "", window.location.pathname);
  transcript.reset();
  $("session-title").textContent = "No session open";
  $("usage").textContent = "";
  $("composer").hidden = true;
  $("session-actions").hidden = true;
  $("welcome").hidden = true;
  $("in-doubt").hidden = true;
  $("empty-hint").hidden = false;
  $("empty-hint").textContent = message || "Start a new session, or pick one from the list.";
  renderSessions();
}

async function forkAt(ordinal, text) {
  const forked = await report(api.fork(page.current, ordinal));
  if (!forked) return;
  await refreshSessions();
  await openSession(forked.id);
  const input = $("composer-input");
  input.value = text || "";
  input.focus();
}

async function renameSession() {
  const entry = page.sessions.find((s) => s.id === page.current);
  const title = await askText({
    title: "Rename session",
    label: "Title",
    value: entry ? entry.title : $("session-title").textContent,
  });
  if (title === null || !page.current) return;
  const done = await report(api.rename(page.current, title));
  if (done) {
    showTitle(done.title);
    await refreshSessions();
  }
}

function showStar(starred) {
  const button = $("star");
  button.setAttribute("aria-pressed", starred ? "true" : "false");
  button.querySelector(".star-glyph").textContent = starred ? "★" : "☆";
}

async function toggleStar() {
  if (!page.current) return;
  const starred = $("star").getAttribute("aria-pressed") !== "true";
  if ((await report(api.star(page.current, starred))) !== undefined) {
    showStar(starred);
    await refreshSessions();
  }
}

async function deleteSession() {
  if (!page.current) return;
  const answer = await askDecision({
    title: "Delete this session?",
    text: "Its whole history is removed. This cannot be undone.",
    details: $("session-title").textContent,
    subject: "",
    reason: false,
    choices: [
      { kind: "keep", label: () => "Keep it", escape: true },
      { kind: "delete", label: () => "Delete" },
    ],
  });
  if (!answer || answer.kind !== "delete" || !page.current) return;
  const id = page.current;
  if ((await report(api.remove(id))) !== undefined) {
    live.unsubscribe(id);
    page.current = "";
    closeSessionView("The session was deleted.");
    await refreshSessions();
  }
}

// --- agents and models ---------------------------------------------------------------------

async function loadModels(id) {
  const picker = $("model-picker");
  let models = null;
  if (page.hasRuntime) {
    try {
      models = await api.models(id);
    } catch {
      models = null; // a runtime without a model picker
    }
  } // else: no runtime before the first turn, so nothing to ask (no 404 for every session)
  if (id !== page.current) return;
  const options = [el("option", { value: "" }, "the agent's model")];
  for (const model of (models && models.models) || []) {
    const option = el("option", { value: model.ref }, `${model.name} (${model.ref})`);
    if (model.is_current && models.current_model_ref) option.selected = true;
    options.push(option);
  }
  picker.replaceChildren(...options);
  if (page.modelChoice) picker.value = page.modelChoice;
}

// --- tool calls in doubt after a crash -------------------------------------------------------

async function loadInDoubt(id) {
  if (!id) return;
  let answer = null;
  try {
    answer = await api.inDoubt(id);
  } catch {
    answer = null;
  }
  if (id !== page.current) return;
  const calls = (answer && answer.in_doubt) || [];
  const decide = (call, action) => decideInDoubt(id, call, action);
  showInDoubt($("in-doubt"), $("in-doubt-list"), calls, decide);
}

async function decideInDoubt(id, call, action) {
  const done = await report(api.decide(id, call.tool_call_id, action));
  if (done !== undefined) {
    transcript.addNotice(`Decided ${call.name}: ${action}.`, "info");
    clearError();
  }
  await loadInDoubt(id);
  if (id === page.current) $("composer-input").focus();
}

// --- narrow screens: the session list behind a button ----------------------------------------

function showSessions(open) {
  document.body.classList.toggle("sessions-open", open);
  $("toggle-sessions").setAttribute("aria-expanded", open ? "true" : "false");
}

// --- composer ------------------------------------------------------------------------------

async function send({ queue = false } = {}) {
  const input = $("composer-input");
  const text = input.value.trim();
  const id = page.current;
  if (!text || !id) return;
  input.value = "";
  clearError();
  let shown = null;
  try {
    if (queue) {
      await api.followUp(id, text);
      transcript.addNotice(`Queued for when the agent is done: ${text}`, "info");
    } else if (transcript.running) {
      await api.steer(id, text);
      transcript.addNotice(`Sent to the running turn: ${text}`, "info");
    } else {
      shown = transcript.addUser(text);
      page.messages += 1;
      $("welcome").hidden = true;
      await api.run(id, agents.target(), text, page.modelChoice);
      page.modelChoice = "";
    }
  } catch (error) {
    if (shown) {
      transcript.removeUser(shown);
      page.messages -= 1;
      agents.showWelcome(page.messages);
    }
    if (!input.value) input.value = text;
    showError(error);
  }
}

function wire() {
  $("new-session").addEventListener("click", newSession);
  $("search").addEventListener("input", () => pages.search($("search").value));
  $("rename").addEventListener("click", renameSession);
  $("star").addEventListener("click", toggleStar);
  $("delete").addEventListener("click", deleteSession);
  $("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });
  $("queue").addEventListener("click", () => send({ queue: true }));
  $("cancel").addEventListener("click", () => report(api.cancel(page.current)));
  $("model-picker").addEventListener("change", (event) => {
    page.modelChoice = event.target.value;
  });
  $("agent-picker").addEventListener("change", () => agents.showWelcome(page.messages));
  $("error-dismiss").addEventListener("click", clearError);
  $("toggle-sessions").addEventListener("click", () =>
    showSessions(!document.body.classList.contains("sessions-open")),
  );
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible") refreshSessions(); // other tabs' changes
  });
  $("composer-input").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send();
    }
  });
}

async function boot() {
  wire();
  await refreshSessions();
  live.start();
  await agents.load(api, report);
  const wanted = decodeURIComponent(window.location.hash.slice(1));
  if (wanted) await openSession(wanted);
  else if (window.matchMedia("(max-width: 40rem)").matches) showSessions(true);
}

boot();
