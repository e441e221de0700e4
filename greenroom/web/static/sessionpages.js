// The session list's data (decision 0026): pages of GET /api/sessions?q=&limit=&cursor=, the
// search text debounced, a later answer never overwritten by an earlier one.

export const PAGE = 50; // sessions per page (the server's default; at most 200)
const MAX_PAGE = 200;
export const DEBOUNCE_MS = 250;

export class SessionPages {
  /**
   * @param {(query: Record<string, string>) => Promise<any>} fetchPage  GET /api/sessions
   * @param {() => void} changed  called once the list (or its "more" state) changed
   */
  constructor(fetchPage, changed) {
    this.fetchPage = fetchPage;
    this.changed = changed;
    this.query = ""; // the search text the list shows
    this.sessions = [];
    this.next = null; // the next page's cursor, or null
    this.generation = 0; // the newest request: answers to older ones are dropped
    this.timer = 0;
  }

  /** Load the first page again (as many sessions as are shown, within one page's limit). */
  async reload() {
    const generation = ++this.generation;
    const limit = Math.min(MAX_PAGE, Math.max(PAGE, this.sessions.length));
    const params = { limit: String(limit) };
    if (this.query) params.q = this.query;
    const body = await this.fetchPage(params);
    if (generation !== this.generation || !body || !Array.isArray(body.sessions)) return;
    this.sessions = body.sessions;
    this.next = body.next_cursor || null;
    this.changed();
  }

  /** Append the next page (sessions already shown are not repeated). */
  async more() {
    if (!this.next) return;
    const generation = ++this.generation;
    const params = { limit: String(PAGE), cursor: this.next };
    if (this.query) params.q = this.query;
    const body = await this.fetchPage(params);
    if (generation !== this.generation || !body || !Array.isArray(body.sessions)) return;
    const shown = new Set(this.sessions.map((s) => s.id));
    this.sessions = this.sessions.concat(body.sessions.filter((s) => !shown.has(s.id)));
    this.next = body.next_cursor || null;
    this.changed();
  }

  /** The search box changed: search once the typing pauses. */
  search(text) {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.query = text.trim();
      this.sessions = [];
      this.reload();
    }, DEBOUNCE_MS);
  }

  /** Forget a session (deleted) without asking the server. */
  drop(id) {
    this.sessions = this.sessions.filter((s) => s.id !== id);
  }
}
