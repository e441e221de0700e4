// The agent picker: the agents this server lists (a team file's agents one by one), their
// welcome messages, and the open session's agent. A session that ran is locked to its agent
// (decision 0019): another agent needs a new session, and the server refuses it with a 409.

import { el } from "./dom.js";

export function agentLabel(file, name) {
  return name && name !== "root" ? `${file}: ${name}` : file;
}

export class AgentPicker {
  /**
   * @param {HTMLSelectElement} picker
   * @param {HTMLElement} hint  says why the picker is locked
   * @param {HTMLElement} welcome  where an agent's welcome message shows
   */
  constructor(picker, hint, welcome) {
    this.picker = picker;
    this.hint = hint;
    this.welcome = welcome;
    this.messages = new Map(); // picker value -> welcome_message, when the listing has one
    this.defaultAgent = "";
  }

  /** Fill the picker from GET /api/agents (`api`: the page's API, `report`: shows errors). */
  async load(api, report) {
    const sources = (await report(api.agents())) || [];
    const options = [];
    for (const source of sources) {
      if (source.multi) {
        const config = await report(api.agent(source.name));
        const agents = (config && config.agents) || {};
        for (const [name, agent] of Object.entries(agents)) {
          const value = `${source.name}/${name}`;
          options.push([value, `${source.name}: ${name}`]);
          const welcome = (agent && agent.welcome_message) || source.welcome_message;
          if (welcome) this.messages.set(value, welcome);
        }
      } else {
        const label = source.description ? `${source.name} — ${source.description}` : source.name;
        options.push([source.name, label]);
        if (source.welcome_message) this.messages.set(source.name, source.welcome_message);
      }
    }
    this.picker.replaceChildren(...options.map(([value, label]) => el("option", { value }, label)));
    this.defaultAgent = (options.find(([value]) => value === "default") || options[0] || [""])[0];
    this.picker.value = this.defaultAgent;
  }

  /** Show `session`'s agent (a snapshot or a list entry); `shown`: its messages on screen. */
  show(session, shown) {
    const picker = this.picker;
    const file = session.agent_file || "";
    const name = session.agent_name || "";
    if (!file) {
      picker.disabled = false;
      if (!picker.value || picker.dataset.locked) picker.value = this.defaultAgent || "";
      delete picker.dataset.locked;
      this.hint.textContent = "";
      this.showWelcome(shown);
      return;
    }
    const has = (value) => [...picker.options].some((o) => o.value === value);
    let value = has(`${file}/${name}`) ? `${file}/${name}` : file;
    if (!has(value)) {
      // An agent this server no longer lists (or the listing is not loaded yet): shown anyway.
      value = name ? `${file}/${name}` : file;
      picker.append(el("option", { value }, agentLabel(file, name)));
    }
    picker.value = value;
    picker.disabled = true;
    picker.dataset.locked = "true";
    this.hint.textContent = "This session's agent. Start a new session for another one.";
    this.showWelcome(shown);
  }

  /** The agent's welcome message, while the session shows no message yet. */
  showWelcome(shown) {
    const text = shown === 0 ? this.messages.get(this.picker.value) || "" : "";
    this.welcome.textContent = text;
    this.welcome.hidden = !text;
  }

  /** The run's path: `source` or `source/agent_name`, each part URL-encoded. */
  target() {
    const value = this.picker.value || "default";
    return value.split("/").map(encodeURIComponent).join("/");
  }
}
