// One open session: its transcript, built from a snapshot and then from the session's event
// log through one idempotent reducer, apply(seq, event), that skips what it has seen.
// Model and tool output is untrusted: everything is rendered as text nodes, never as HTML.

import { el, prettyJson } from "./dom.js";

const QUIET = new Set(["session_title", "warning", "token_usage", "agent_info"]);

export class Transcript {
  /**
   * @param {HTMLElement} root  the role="log" element
   * @param {object} hooks  title(t), usage(u), running(bool, agent), pending(request|null),
   *   finished(text), gap(), exited(), fork(ordinal), agentInfo(info), inDoubt()
   */
  constructor(root, hooks) {
    this.root = root;
    this.hooks = hooks;
    // Follow the end while the reader is there: the box changes size as the page lays out
    // (panels, the composer, the window), and a reader who scrolled up stays where they are.
    this.atEnd = true;
    this.scrolledTo = -1; // where the page itself last scrolled to (not the reader)
    root.addEventListener("scroll", () => {
      if (root.scrollTop === this.scrolledTo) return;
      this.atEnd = root.scrollTop + root.clientHeight >= root.scrollHeight - 4;
    });
    new ResizeObserver(() => {
      if (this.atEnd) this.scrollToEnd();
    }).observe(root);
    this.reset();
  }

  reset() {
    this.root.replaceChildren();
    this.lastSeq = 0;
    this.scanUntil = 0; // events up to this seq only rebuild the turn in flight (after a reload)
    this.userCount = 0;
    this.assistant = null; // the reply being streamed: {node, text, reasoning}
    this.tools = new Map(); // tool call id -> its status and result nodes
    this.pending = null; // a tool confirmation, elicitation or continuation waiting for the user
    this.running = false;
    this.inflight = ""; // while scanning: text streamed since the last stored message
  }

  /** Render a snapshot; returns the `since` to subscribe with (null: replay the buffer). */
  load(snapshot) {
    this.reset();
    for (const message of snapshot.messages || []) this.renderStored(message);
    this.hooks.title(snapshot.title || "");
    this.hooks.usage({
      input_tokens: snapshot.input_tokens,
      output_tokens: snapshot.output_tokens,
      cost: snapshot.cost || 0,
    });
    this.lastSeq = snapshot.last_event_seq || 0;
    this.setRunning(Boolean(snapshot.streaming));
    this.scrollToEnd();
    if (snapshot.streaming && this.lastSeq > 0) {
      // A turn is running (started before a reload, or by another client): replay the
      // buffer to find its pending question and the text streamed so far.
      this.scanUntil = this.lastSeq;
      this.lastSeq = 0;
      return null;
    }
    return this.lastSeq;
  }

  renderStored(item) {
    const message = item.message || {};
    if (item.implicit || message.role === "system") return;
    if (message.role === "user") {
      this.addUser(message.content || "");
    } else if (message.role === "assistant") {
      if (message.content || message.reasoning_content) {
        const reply = this.addAssistant(item.agent_name);
        this.appendText(reply, message.content || "");
        this.appendReasoning(reply, message.reasoning_content || "");
        this.closeAssistant();
      }
      for (const call of message.tool_calls || []) this.addTool(call);
    } else if (message.role === "tool") {
      this.setToolResult(message.tool_call_id, message.content || "", message.is_error);
    }
  }

  apply(seq, event) {
    if (event.type === "gap") {
      if (this.scanUntil) this.endScan();
      else this.hooks.gap();
      return;
    }
    if (seq > 0) {
      if (seq <= this.lastSeq) return; // seen already: replays never duplicate
      this.lastSeq = seq;
    }
    if (this.scanUntil) {
      if (seq <= this.scanUntil) {
        this.scan(event);
        if (seq === this.scanUntil) this.endScan();
        return;
      }
      this.endScan();
    }
    this.render(event);
  }

  scan(event) {
    switch (event.type) {
      case "agent_choice":
        this.inflight += event.content || "";
        return;
      case "stream_started":
      case "token_usage":
      case "tool_call":
      case "tool_call_response":
      case "stream_stopped":
        this.inflight = "";
        this.pending = null;
        return;
      case "tool_call_confirmation":
      case "elicitation_request":
      case "max_iterations_reached":
        this.pending = event;
        return;
      default:
        if (!QUIET.has(event.type)) this.pending = null;
    }
  }

  endScan() {
    this.scanUntil = 0;
    const last = this.root.lastElementChild;
    const shown = last && last.classList.contains("assistant") ? last.dataset.text || "" : "";
    if (this.inflight && !shown.endsWith(this.inflight)) {
      this.appendText(this.currentAssistant(""), this.inflight);
    }
    this.inflight = "";
    if (this.pending) this.hooks.pending(this.pending);
  }

  render(event) {
    if (this.pending && !QUIET.has(event.type) && event.type !== this.pending.type) {
      this.pending = null;
      this.hooks.pending(null);
    }
    switch (event.type) {
      case "user_message":
        this.closeAssistant();
        this.addUser(event.message || "");
        break;
      case "stream_started":
        this.setRunning(true, event.agent_name);
        break;
      case "agent_choice":
        this.appendText(this.currentAssistant(event.agent_name), event.content || "");
        break;
      case "agent_choice_reasoning":
        this.appendReasoning(this.currentAssistant(event.agent_name), event.content || "");
        break;
      case "tool_call":
        this.closeAssistant();
        this.addTool(event.tool_call);
        break;
      case "tool_call_confirmation":
        this.closeAssistant();
        if (!this.tools.has(event.tool_call.id)) this.addTool(event.tool_call);
        this.setToolStatus(event.tool_call.id, "waiting for approval");
        this.pending = event;
        this.hooks.pending(event);
        break;
      case "tool_call_response":
        this.setToolResult(event.tool_call_id, event.response || "", false);
        break;
      case "elicitation_request":
        this.pending = event;
        this.hooks.pending(event);
        break;
      case "token_usage":
        this.hooks.usage(event.usage || {});
        break;
      case "session_title":
        this.hooks.title(event.title || "");
        break;
      case "agent_info":
        this.hooks.agentInfo(event);
        break;
      case "error":
        this.closeAssistant();
        this.addNotice(`Error: ${event.error || "the turn failed"}`, "error");
        break;
      case "warning":
        this.addNotice(`Warning: ${event.message || ""}`, "warning");
        break;
      case "hook_blocked":
        this.addNotice(`Blocked by a hook: ${event.tool_call?.function?.name || "tool"}: ${event.message || ""}`, "warning");
        break;
      case "turn_interrupted":
        this.closeAssistant();
        this.addNotice("The server stopped during this turn; it was interrupted.", "warning");
        break;
      case "tool_call_in_doubt":
      case "tool_call_decided":
        if (this.hooks.inDoubt) this.hooks.inDoubt();
        break;
      case "max_iterations_reached":
        // The turn waits for a resume (continue or stop): the dialog asks; it has not stopped.
        this.closeAssistant();
        this.addNotice(
          `The agent reached its limit of ${event.max_iterations} model calls and waits for you to continue or stop.`,
          "warning",
        );
        this.pending = event;
        this.hooks.pending(event);
        break;
      case "stream_stopped":
        this.finishTurn(event.reason);
        break;
      case "session_exited":
        this.hooks.exited();
        break;
      default:
        break;
    }
    this.scrollToEnd();
  }

  setRunning(running, agent = "") {
    this.running = running;
    this.hooks.running(running, agent);
  }

  finishTurn(reason) {
    const reply = this.assistant;
    this.closeAssistant();
    if (reason === "canceled") this.addNotice("The turn was cancelled.", "warning");
    this.setRunning(false);
    this.pending = null;
    this.hooks.pending(null);
    this.hooks.finished(reply ? reply.node.dataset.text || "" : "");
  }

  // --- items -------------------------------------------------------------------------------

  addUser(text) {
    const ordinal = this.userCount;
    this.userCount += 1;
    const fork = el("button", { type: "button", class: "fork" }, "Fork from here");
    fork.setAttribute("aria-label", `Fork from here (your message ${ordinal + 1})`);
    fork.addEventListener("click", () => this.hooks.fork(ordinal, text));
    const node = el(
      "article",
      { class: "message user" },
      el("p", { class: "who" }, "You"),
      el("div", { class: "text" }, text),
      fork,
    );
    this.root.append(node);
    return node;
  }

  /** Take back a user message the server refused (the turn did not start). */
  removeUser(node) {
    if (!node.isConnected) return;
    node.remove();
    this.userCount -= 1;
  }

  addAssistant(agentName) {
    const text = document.createTextNode("");
    const reasoningText = document.createTextNode("");
    const reasoning = el(
      "details",
      { class: "reasoning", hidden: "" },
      el("summary", {}, "Reasoning"),
      el("pre", {}, reasoningText),
    );
    const node = el(
      "article",
      { class: "message assistant", "aria-busy": "true" },
      el("p", { class: "who" }, agentName ? `Agent (${agentName})` : "Agent"),
      reasoning,
      el("div", { class: "text" }, text),
    );
    node.dataset.text = "";
    this.root.append(node);
    this.assistant = { node, text, reasoning, reasoningText };
    return this.assistant;
  }

  currentAssistant(agentName) {
    return this.assistant || this.addAssistant(agentName);
  }

  appendText(reply, delta) {
    if (!delta) return;
    reply.text.appendData(delta);
    reply.node.dataset.text += delta;
  }

  appendReasoning(reply, delta) {
    if (!delta) return;
    reply.reasoning.hidden = false;
    reply.reasoningText.appendData(delta);
  }

  closeAssistant() {
    if (this.assistant) this.assistant.node.setAttribute("aria-busy", "false");
    this.assistant = null;
  }

  addTool(call) {
    if (!call || this.tools.has(call.id)) return;
    const fn = call.function || {};
    const status = el("p", { class: "tool-status" }, "running…");
    const result = el("pre", { class: "code tool-result", hidden: "" });
    const node = el(
      "article",
      { class: "message tool" },
      el("p", { class: "who" }, `Tool call: ${fn.name || "?"}`),
      el("pre", { class: "code tool-args" }, prettyJson(fn.arguments)),
      status,
      result,
    );
    this.tools.set(call.id, { status, result });
    this.root.append(node);
  }

  setToolStatus(id, text) {
    const tool = this.tools.get(id);
    if (tool) tool.status.textContent = text;
  }

  setToolResult(id, text, isError) {
    const tool = this.tools.get(id);
    if (!tool) return;
    tool.status.textContent = isError ? "failed:" : "result:";
    tool.result.textContent = text;
    tool.result.hidden = false;
  }

  addNotice(text, kind) {
    this.root.append(el("p", { class: `notice ${kind}` }, text));
  }

  scrollToEnd() {
    this.root.scrollTop = this.root.scrollHeight;
    this.scrolledTo = this.root.scrollTop;
    this.atEnd = true;
  }
}
