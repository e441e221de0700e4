// Tool calls a crash left in doubt: listed above the transcript, each with what a person can
// decide (GET/POST /api/sessions/{id}/recovery/decisions). Nothing runs again by itself.

import { el, prettyJson } from "./dom.js";

const ACTIONS = [
  ["skip", "Skip", "it did not happen: tell the agent it was not run"],
  ["rerun", "Run again", "run the tool once more now"],
  ["done", "Mark done", "it happened: tell the agent it ran"],
];

/**
 * Render `calls` into `section`'s list (hidden when there are none).
 * @param {(call: object, action: string) => void} decide
 */
export function showInDoubt(section, list, calls, decide) {
  section.hidden = calls.length === 0;
  list.replaceChildren(
    ...calls.map((call) => {
      const buttons = ACTIONS.map(([action, label, what]) => {
        const button = el("button", { type: "button" }, label);
        button.setAttribute("aria-label", `${label}: ${call.name} (${what})`);
        button.addEventListener("click", () => decide(call, action));
        return button;
      });
      const started = new Date(call.started_at).toLocaleString();
      return el(
        "li",
        {},
        el("p", { class: "who" }, `${call.name} (started ${started})`),
        el("pre", { class: "code" }, prettyJson(call.arguments)),
        el("div", { class: "dialog-buttons" }, ...buttons),
      );
    }),
  );
}
