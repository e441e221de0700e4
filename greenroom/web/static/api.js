// REST calls to the greenroom API: the bearer token (kept in sessionStorage), JSON bodies with
// their content type, and errors as ApiError. Short commands only: live events come over the
// page's one WebSocket (live.js).

const TOKEN_KEY = "greenroom.token";

export class ApiError extends Error {
  constructor(status, body) {
    super((body && body.message) || `HTTP ${status}`);
    this.status = status;
    this.code = (body && body.code) || "";
  }
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

let askToken = async () => null;

/** Install the function that asks the user for a token (resolves to null when they give up). */
export function onUnauthorized(ask) {
  askToken = ask;
}

async function readJson(response) {
  const text = await response.text();
  if (!text) return null;
  try {
    return JSON.parse(text);
  } catch {
    return { message: text.slice(0, 200) };
  }
}

/** One request; asks for a token and retries on 401. Returns the decoded JSON body. */
export async function call(method, path, body, { keepStream = false, signal } = {}) {
  for (let attempt = 0; ; attempt += 1) {
    const headers = { Accept: "application/json" };
    const bearer = token();
    if (bearer) headers.Authorization = `Bearer ${bearer}`;
    const init = { method, headers, signal };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch (error) {
      if (error && error.name === "AbortError") throw error;
      // fetch says only "Failed to fetch": say what it means.
      throw new ApiError(0, {
        code: "unreachable",
        message: "the greenroom server cannot be reached (is it running? is the network up?)",
      });
    }
    if (response.status === 401 && attempt < 3) {
      await response.body?.cancel();
      const given = await askToken(bearer ? "The access token was not accepted." : "");
      if (given === null) throw new ApiError(401, { message: "an access token is needed" });
      setToken(given);
      continue;
    }
    if (response.ok && keepStream) return response;
    const data = await readJson(response);
    if (!response.ok) throw new ApiError(response.status, data);
    return data;
  }
}

const enc = encodeURIComponent;
const S = (id) => `/api/sessions/${enc(id)}`;

export const api = {
  agents: () => call("GET", "/api/agents"),
  agent: (source) => call("GET", `/api/agents/${enc(source)}`),
  sessions: () => call("GET", "/api/sessions"),
  sessionPage: (query) => call("GET", `/api/sessions?${new URLSearchParams(query)}`),
  create: () => call("POST", "/api/sessions", {}),
  snapshot: (id) => call("GET", `${S(id)}/snapshot`),
  remove: (id) => call("DELETE", S(id)),
  fork: (id, index) => call("POST", `${S(id)}/fork`, { message_index: index }),
  rename: (id, title) => call("PATCH", `${S(id)}/title`, { title }),
  star: (id, starred) => call("PATCH", `${S(id)}/starred`, { starred }),
  models: (id) => call("GET", `${S(id)}/models`),
  steer: (id, text) => call("POST", `${S(id)}/steer`, { messages: [{ role: "user", content: text }] }),
  followUp: (id, text) =>
    call("POST", `${S(id)}/followup`, { messages: [{ role: "user", content: text }] }),
  cancel: (id) => call("POST", `${S(id)}/cancel`),
  resume: (id, decision) => call("POST", `${S(id)}/resume`, decision),
  inDoubt: (id) => call("GET", `${S(id)}/recovery/decisions`),
  decide: (id, toolCallId, action) =>
    call("POST", `${S(id)}/recovery/decisions`, { tool_call_id: toolCallId, action }),
  elicitation: (id, answer) => call("POST", `${S(id)}/elicitation`, answer),

  /**
   * Start a turn detached from this request: once the server accepted it (200), the request
   * is dropped and the turn runs on; its events arrive on the WebSocket subscription, so the
   * turn survives a reload of the page.
   */
  async run(id, target, text, model) {
    const controller = new AbortController();
    const path = `${S(id)}/agent/${target}?on_disconnect=continue`;
    const body = { messages: [{ role: "user", content: text }] };
    if (model) body.model = model;
    await call("POST", path, body, { keepStream: true, signal: controller.signal });
    controller.abort();
  },
};
