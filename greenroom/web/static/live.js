// The page's one WebSocket (/api/ws): subscriptions to the event logs of open sessions,
// resumed from the last seq after every drop, with backoff and a visible connection state.
// Browsers cap HTTP/1.1 connections per host at six, so one socket carries every live event.

const BACKOFF_MIN_MS = 200;
const BACKOFF_MAX_MS = 5000;
const OFFLINE_AFTER = 4; // failed attempts in a row before the state says "offline"

export class Live {
  /**
   * @param {() => string[]} protocols  WebSocket subprotocols (the bearer token, if any)
   * @param {(state: string) => void} onState  "connecting" | "live" | "reconnecting" | "offline"
   */
  constructor(protocols, onState) {
    this.protocols = protocols;
    this.onState = onState;
    this.subscriptions = new Map(); // session id -> {since, handlers}
    this.pending = new Map(); // request id -> {resolve, reject}
    this.nextId = 0;
    this.failures = 0;
    this.socket = null;
    this.timer = 0;
    this.state = "";
  }

  start() {
    this.setState("connecting");
    this.connect();
    window.addEventListener("online", () => this.retryNow());
  }

  setState(state) {
    if (state === this.state) return;
    this.state = state;
    this.onState(state);
  }

  retryNow() {
    if (this.socket === null) this.connect();
  }

  /** Close and reconnect at once (after a new token was given). */
  restart() {
    const socket = this.socket;
    this.socket = null;
    if (socket) socket.close();
    this.failPending("reconnecting");
    this.connect();
  }

  connect() {
    clearTimeout(this.timer);
    const url = new URL("/api/ws", window.location.href);
    url.protocol = url.protocol === "https:" ? "wss" : "ws";
    const socket = new WebSocket(url, this.protocols());
    this.socket = socket;
    socket.addEventListener("open", () => {
      if (this.socket !== socket) return;
      this.failures = 0;
      this.setState("live");
      for (const [id, sub] of this.subscriptions) this.sendSubscribe(id, sub);
    });
    socket.addEventListener("message", (message) => {
      if (this.socket === socket) this.receive(JSON.parse(message.data));
    });
    socket.addEventListener("close", () => {
      if (this.socket !== socket) return;
      this.socket = null;
      this.failPending("connection lost");
      this.failures += 1;
      this.setState(this.failures >= OFFLINE_AFTER ? "offline" : "reconnecting");
      const base = Math.min(BACKOFF_MAX_MS, BACKOFF_MIN_MS * 2 ** (this.failures - 1));
      this.timer = setTimeout(() => this.connect(), base * (0.5 + Math.random() / 2));
    });
  }

  failPending(reason) {
    for (const waiter of this.pending.values()) waiter.reject(new Error(reason));
    this.pending.clear();
  }

  get open() {
    return this.socket !== null && this.socket.readyState === WebSocket.OPEN;
  }

  request(frame, sub = null) {
    return new Promise((resolve, reject) => {
      if (!this.open) {
        reject(new Error("not connected"));
        return;
      }
      this.nextId += 1;
      const id = `p${this.nextId}`;
      this.pending.set(id, { resolve, reject, sub });
      this.socket.send(JSON.stringify({ ...frame, id }));
    });
  }

  /**
   * Follow a session's event log after `since` (null: everything still buffered).
   * handlers: event(seq, event), exited(), failed(error).
   */
  subscribe(sessionId, since, handlers) {
    const sub = { since, handlers };
    this.subscriptions.set(sessionId, sub);
    if (this.open) this.sendSubscribe(sessionId, sub);
  }

  unsubscribe(sessionId) {
    if (!this.subscriptions.delete(sessionId)) return;
    if (this.open) this.request({ op: "unsubscribe", session_id: sessionId }).catch(() => {});
  }

  sendSubscribe(sessionId, sub) {
    // batch: what waits comes as one frame, so a fast turn never outruns the page's reading
    const frame = { op: "subscribe", session_id: sessionId, batch: true };
    if (sub.since !== null) frame.since = sub.since;
    sub.sentSince = sub.since;
    // Frames of the subscription this one replaces may still be on their way; the server
    // sends this request's reply after the last of them, so events count from the reply on.
    sub.ready = false;
    this.request(frame, sub).catch((error) => {
      if (this.subscriptions.get(sessionId) === sub && error.status) sub.handlers.failed(error);
    });
  }

  receive(frame) {
    if (Object.hasOwn(frame, "ok")) {
      const waiter = this.pending.get(frame.id);
      if (!waiter) return;
      this.pending.delete(frame.id);
      if (waiter.sub && frame.ok) waiter.sub.ready = true;
      if (frame.ok) waiter.resolve(frame.result);
      else waiter.reject(Object.assign(new Error(frame.error.message), frame.error));
      return;
    }
    const sub = this.subscriptions.get(frame.session_id);
    if (!sub || !sub.ready || Object.hasOwn(frame, "run")) return; // runs repeat log events
    if (frame.subscription_ended) {
      if (frame.reason === "session_exited") sub.handlers.exited();
      else if (frame.reason === "dropped" && this.open) this.sendSubscribe(frame.session_id, sub);
      return;
    }
    // A batch subscription sends what waited as one frame: {"events": [{seq, event}, ...]}.
    const events = Object.hasOwn(frame, "events") ? frame.events : [frame];
    for (const item of events) {
      if (!Object.hasOwn(item, "event")) continue;
      if (item.seq > 0 && sub.sentSince !== null && item.seq <= sub.sentSince) {
        // Only seqs after `since` come back, unless the session's log was restarted (server
        // restart, retired actor) and counts from 1 again: that is a gap.
        sub.sentSince = null;
        sub.handlers.event(0, { type: "gap" });
        return;
      }
      if (item.seq > 0) sub.since = item.seq;
      sub.handlers.event(item.seq, item.event);
    }
  }
}
