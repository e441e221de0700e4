// Modal dialogs: decisions the agent waits for (tool approval, a turn at its max_iterations;
// later kinds are one more entry in a table), elicitation forms built from their JSON schema,
// and a one-line text prompt. Escape means "no": it rejects a tool call, stops a turn at its
// limit and cancels a question. The first focus is on the dialog's heading, never on
// "Approve" or "Continue", so a stray Enter cannot approve anything.

import { el, prettyJson } from "./dom.js";

/**
 * The answers to a tool_call_confirmation, in button order. A new kind (approve-balanced,
 * a recovery decision, ...) is one more entry: `kind` is the `confirmation` sent to the
 * server, `extra` more fields of the same request.
 */
export const TOOL_DECISIONS = [
  { kind: "reject", label: () => "Reject", escape: true },
  { kind: "approve", label: () => "Approve", primary: true },
  {
    kind: "approve-tool",
    label: (name) => `Allow ${name} for 10 minutes`,
    extra: { expires_in: 600 },
  },
  { kind: "approve-tool", label: (name) => `Always allow ${name}` },
];

function showModal(dialog, focus) {
  if (!dialog.open) dialog.showModal();
  focus.focus();
}

let closeDecision = null;

/**
 * Ask for a decision. Resolves to {kind, reason} or to null when closed from outside.
 * @param {{title: string, text: string, details: string, subject: string, choices: object[]}} ask
 */
export function askDecision(ask) {
  const dialog = document.getElementById("decision-dialog");
  const title = document.getElementById("decision-title");
  const reason = document.getElementById("decision-reason");
  const buttons = document.getElementById("decision-buttons");
  const opener = document.activeElement;
  if (closeDecision) closeDecision(null);
  title.textContent = ask.title;
  document.getElementById("decision-text").textContent = ask.text;
  const details = document.getElementById("decision-details");
  details.textContent = ask.details;
  details.hidden = !ask.details;
  reason.value = "";
  // Only a tool call's rejection sends a reason (a delete has none to send).
  document.getElementById("decision-reason-field").hidden = ask.reason === false;
  return new Promise((resolve) => {
    const finish = (answer) => {
      closeDecision = null;
      dialog.removeEventListener("cancel", onCancel);
      if (dialog.open) dialog.close();
      if (opener instanceof HTMLElement && opener.isConnected) opener.focus();
      resolve(answer);
    };
    const escape = ask.choices.find((choice) => choice.escape);
    const onCancel = (event) => {
      event.preventDefault();
      finish(escape ? { kind: escape.kind, reason: reason.value } : null);
    };
    buttons.replaceChildren(
      ...ask.choices.map((choice) => {
        const button = el(
          "button",
          { type: "button", class: choice.primary ? "primary" : "" },
          choice.label(ask.subject),
        );
        button.addEventListener("click", () =>
          finish({ kind: choice.kind, reason: reason.value, extra: choice.extra || {} }),
        );
        return button;
      }),
    );
    dialog.addEventListener("cancel", onCancel);
    closeDecision = finish;
    showModal(dialog, title);
  });
}

/** Close an open decision dialog (someone else answered): its promise resolves to null. */
export function dismissDecision() {
  if (closeDecision) closeDecision(null);
}

let closeElicitation = null;

/**
 * Show an elicitation request as a form. Resolves to {action, content} or null when closed
 * from outside.
 */
export function askElicitation(request) {
  const dialog = document.getElementById("elicit-dialog");
  const form = document.getElementById("elicit-form");
  const title = document.getElementById("elicit-title");
  const opener = document.activeElement;
  if (closeElicitation) closeElicitation(null);
  document.getElementById("elicit-text").textContent = request.message || "";
  const fields = buildFields(request.schema);
  const holder = document.getElementById("elicit-fields");
  holder.replaceChildren(...fields.nodes);
  if (request.mode === "url" && request.url) {
    holder.append(el("p", {}, "Open this address to continue: "), el("pre", { class: "code" }, request.url));
  }
  return new Promise((resolve) => {
    const finish = (answer) => {
      closeElicitation = null;
      form.removeEventListener("submit", onSubmit);
      dialog.removeEventListener("cancel", onCancel);
      decline.removeEventListener("click", onDecline);
      cancel.removeEventListener("click", onCancelClick);
      if (dialog.open) dialog.close();
      if (opener instanceof HTMLElement && opener.isConnected) opener.focus();
      resolve(answer);
    };
    const onSubmit = (event) => {
      event.preventDefault();
      finish({ action: "accept", content: fields.read() });
    };
    const onCancel = (event) => {
      event.preventDefault();
      finish({ action: "cancel", content: null });
    };
    const onDecline = () => finish({ action: "decline", content: null });
    const onCancelClick = () => finish({ action: "cancel", content: null });
    const decline = document.getElementById("elicit-decline");
    const cancel = document.getElementById("elicit-cancel");
    form.addEventListener("submit", onSubmit);
    dialog.addEventListener("cancel", onCancel);
    decline.addEventListener("click", onDecline);
    cancel.addEventListener("click", onCancelClick);
    closeElicitation = finish;
    showModal(dialog, title);
  });
}

export function dismissElicitation() {
  if (closeElicitation) closeElicitation(null);
}

const INPUT_TYPES = { email: "email", uri: "url", date: "date", "date-time": "datetime-local" };

/** Form fields for a JSON schema object (string, number, integer, boolean, enum). */
export function buildFields(schema) {
  const properties = (schema && schema.properties) || {};
  const required = new Set((schema && schema.required) || []);
  const nodes = [];
  const readers = [];
  for (const [name, prop] of Object.entries(properties)) {
    const id = `field-${name.replace(/[^A-Za-z0-9_-]/g, "_")}`;
    const labelText = prop.title || name;
    let input;
    if (Array.isArray(prop.enum)) {
      input = el("select", { id });
      for (const value of prop.enum) input.append(el("option", { value: String(value) }, String(value)));
    } else if (prop.type === "boolean") {
      input = el("input", { id, type: "checkbox" });
      if (prop.default === true) input.checked = true;
    } else if (prop.type === "number" || prop.type === "integer") {
      input = el("input", { id, type: "number", step: prop.type === "integer" ? "1" : "any" });
    } else {
      input = el("input", { id, type: INPUT_TYPES[prop.format] || "text", autocomplete: "off" });
    }
    if (prop.default !== undefined && prop.type !== "boolean") input.value = String(prop.default);
    if (required.has(name) && prop.type !== "boolean") input.required = true;
    const row = el("div", { class: "field" }, el("label", { for: id }, labelText), input);
    if (prop.description) {
      const hint = el("p", { class: "hint", id: `${id}-hint` }, prop.description);
      input.setAttribute("aria-describedby", hint.id);
      row.append(hint);
    }
    nodes.push(row);
    readers.push([name, prop, input]);
  }
  const read = () => {
    const content = {};
    for (const [name, prop, input] of readers) {
      if (prop.type === "boolean") content[name] = input.checked;
      else if (input.value === "" && !required.has(name)) continue;
      else if (prop.type === "number" || prop.type === "integer") content[name] = Number(input.value);
      else content[name] = input.value;
    }
    return content;
  };
  return { nodes, read };
}

/** Ask for one line of text; resolves to the text, or null when cancelled. */
export function askText({ title, label, value = "", type = "text", ok = "Save" }) {
  const dialog = document.getElementById("text-dialog");
  const form = document.getElementById("text-form");
  const input = document.getElementById("text-input");
  const cancel = document.getElementById("text-cancel");
  const opener = document.activeElement;
  document.getElementById("text-title").textContent = title;
  document.getElementById("text-label").textContent = label;
  document.getElementById("text-ok").textContent = ok;
  input.type = type;
  input.value = value;
  return new Promise((resolve) => {
    const finish = (answer) => {
      form.removeEventListener("submit", onSubmit);
      dialog.removeEventListener("cancel", onCancel);
      cancel.removeEventListener("click", onCancel);
      if (dialog.open) dialog.close();
      if (opener instanceof HTMLElement && opener.isConnected) opener.focus();
      resolve(answer);
    };
    const onSubmit = (event) => {
      event.preventDefault();
      finish(input.value);
    };
    const onCancel = (event) => {
      event.preventDefault();
      finish(null);
    };
    form.addEventListener("submit", onSubmit);
    dialog.addEventListener("cancel", onCancel);
    cancel.addEventListener("click", onCancel);
    showModal(dialog, input);
  });
}

/** The answers to a max_iterations_reached event, in button order (Escape stops). */
export const CONTINUE_DECISIONS = [
  { kind: "reject", label: () => "Stop", escape: true },
  { kind: "approve", label: () => "Continue (10 more)", primary: true },
];

/**
 * Ask whether a turn that reached its max_iterations goes on; resolves to the body of
 * POST .../resume (approve: 10 more model calls; reject: the turn stops), or null when the
 * dialog was closed from outside.
 */
export async function askContinuation(request) {
  const limit = Number(request.max_iterations || 0);
  const answer = await askDecision({
    title: "Continue this turn?",
    text:
      `The agent has made ${limit} model calls in this turn, its limit (max_iterations). ` +
      "It waits: continue for 10 more, or stop the turn here.",
    details: "",
    subject: "",
    reason: false,
    choices: CONTINUE_DECISIONS,
  });
  return answer ? { confirmation: answer.kind } : null;
}

/**
 * Ask about a tool_call_confirmation event; resolves to the body of POST .../resume, or null
 * when the dialog was closed from outside.
 */
export async function askToolCall(request) {
  const call = request.tool_call || {};
  const name = (call.function && call.function.name) || "a tool";
  const rule = request.permission_rule ? ` (it asks because of ${request.permission_rule})` : "";
  const answer = await askDecision({
    title: "Approve tool call?",
    text: `The agent wants to run ${name} with these arguments:${rule}`,
    details: prettyJson(call.function && call.function.arguments),
    subject: name,
    choices: TOOL_DECISIONS,
  });
  if (!answer) return null;
  const decision = { ...(answer.extra || {}), confirmation: answer.kind };
  if (answer.kind === "reject" && answer.reason) decision.reason = answer.reason;
  if (answer.kind === "approve-tool") decision.tool_name = name;
  return decision;
}
