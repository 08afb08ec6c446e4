// Live logs: the request log (control's requests and every edge's deliveries) as it happens, over
// Server-Sent Events (GET /api/logs?stream=1), after the latest page of GET /api/logs.
import { get } from "../api.js";
import { card, clear, formatTime, h } from "../ui.js";

export const title = "Live logs";

const KEEP = 500;

export async function render(container) {
  const state = h("span.pill#tail-state", null, "connecting…");
  const pause = h("button#tail-pause", { type: "button", onclick: togglePause }, "Pause");
  const level = h("select#tail-level", { "aria-label": "Level", onchange: repaint },
    h("option", { value: "" }, "All levels"), ["info", "warn", "error"].map((l) => h("option", { value: l }, l)));
  const source = h("select#tail-source", { "aria-label": "Source", onchange: repaint },
    h("option", { value: "" }, "Control and edges"), h("option", { value: "delivery" }, "Edge deliveries"), h("option", { value: "request" }, "Control requests"));
  const filter = h("input#tail-filter", { type: "search", placeholder: "Filter by path, status, node…", oninput: repaint, "aria-label": "Filter" });
  const rows = h("tbody#tail-rows");
  const counter = h("span.muted.small");
  container.append(card("Request log", [filter, level, source, pause, h("button", { type: "button", onclick: () => { entries = []; repaint(); } }, "Clear"), state],
    h("div.log-scroll", null, h("table.log-table", null,
      h("thead", null, h("tr", null, ["Time", "Level", "Node", "Method", "Status", "Path", "Cache", "ms"].map((t) => h("th", null, t)))),
      rows)), counter));

  let entries = [];
  let paused = false;
  let queued = [];
  const seen = new Set();

  function matches(entry) {
    if (level.value && entry.level !== level.value) return false;
    if (source.value && entry.code !== source.value) return false;
    const text = filter.value.trim().toLowerCase();
    return !text || `${entry.path} ${entry.status} ${entry.node} ${entry.method} ${entry.cache || ""}`.toLowerCase().includes(text);
  }

  function rowFor(entry, fresh) {
    return h(`tr${fresh ? ".fresh" : ""}`, { dataset: { id: entry.id, path: entry.path, code: entry.code, requestId: entry.requestId || "" } },
      h("td.mono", null, formatTime(entry.timestamp)),
      h("td", null, h(`span.badge.${entry.level === "error" ? "bad" : entry.level === "warn" ? "warn" : "info"}`, null, entry.level)),
      h("td", null, entry.node),
      h("td", null, entry.method || ""),
      h(`td.status-${String(entry.status)[0]}`, null, String(entry.status)),
      h("td.path", null, entry.path), // whole, wrapped in its column (dashboard.css)
      h("td", null, entry.cache || ""),
      h("td.num", null, entry.durationMs === null || entry.durationMs === undefined ? "" : String(entry.durationMs)));
  }

  function repaint() {
    clear(rows, entries.filter(matches).map((e) => rowFor(e, false)));
    counter.textContent = `${entries.length} entries kept (newest ${KEEP}).`;
  }

  function add(entry) {
    if (seen.has(entry.id)) return;
    seen.add(entry.id);
    entries.unshift(entry);
    if (entries.length > KEEP) {
      for (const old of entries.splice(KEEP)) seen.delete(old.id);
      rows.lastElementChild?.remove();
    }
    if (matches(entry)) rows.prepend(rowFor(entry, true));
    counter.textContent = `${entries.length} entries kept (newest ${KEEP}).`;
  }

  /** Entries read rather than streamed (the latest page, what was logged while the stream was down), each in its place. */
  function merge(records) {
    for (const entry of records) {
      if (!seen.has(entry.id)) { seen.add(entry.id); entries.push(entry); }
    }
    entries.sort((a, b) => b.id - a.id);
    for (const old of entries.splice(KEEP)) seen.delete(old.id);
    repaint();
  }

  function togglePause() {
    paused = !paused;
    pause.textContent = paused ? `Resume${queued.length ? ` (${queued.length})` : ""}` : "Pause";
    if (!paused) {
      const waiting = queued;
      queued = [];
      if (waiting.length && entries.length && waiting[0].id < entries[0].id) merge(waiting); // older ones read meanwhile
      else waiting.forEach(add);
    }
  }

  // What was logged while the stream was down is read once it is back: from a second before the newest entry known
  // (entries of one moment), repeats dropped by id.
  async function catchUp() {
    const newest = [entries[0], queued[queued.length - 1]].filter(Boolean).map((e) => e.timestamp).sort().pop();
    if (!newest) return; // nothing known yet: the page read at the start covers it
    let page;
    try {
      page = await get("/api/logs", { since: new Date(Date.parse(newest) - 1000).toISOString(), limit: KEEP });
    } catch {
      return; // the stream goes on; a 401 has led to the sign-in page
    }
    if (stopped) return;
    const waiting = new Set(queued.map((e) => e.id));
    const missed = page.records.filter((e) => !seen.has(e.id) && !waiting.has(e.id));
    if (!missed.length) return;
    if (paused) {
      queued = [...queued, ...missed].sort((a, b) => a.id - b.id);
      pause.textContent = `Resume (${queued.length})`;
    } else {
      merge(missed);
    }
  }

  function received(event) {
    const entry = JSON.parse(event.data);
    if (paused) {
      queued.push(entry);
      pause.textContent = `Resume (${queued.length})`;
    } else {
      add(entry);
    }
  }

  // A dropped stream is asked for again by the browser itself ("reconnecting…"); one refused (an answer that is not
  // the stream: a 401 once the session ended, a 502 from a proxy) is given up by the browser. The log's page is then
  // read: a 401 leads to the sign-in page (api.js), anything else opens the stream again a little later.
  let events = null;
  let stopped = false;
  let retry = null;
  let dropped = false;
  function connect() {
    events = new EventSource("/api/logs?stream=1");
    events.addEventListener("open", () => {
      state.className = "pill ok";
      state.textContent = "live";
      if (dropped) { dropped = false; catchUp(); }
    });
    events.addEventListener("error", () => {
      dropped = true;
      if (events.readyState !== EventSource.CLOSED) {
        state.className = "pill warn";
        state.textContent = "reconnecting…";
        return;
      }
      state.className = "pill bad";
      state.textContent = "disconnected";
      get("/api/logs", { limit: 1 }).catch((error) => error).then((error) => {
        if (stopped) return;
        if (error && error.status === 401) { state.textContent = "signed out"; return; }
        retry = setTimeout(connect, 5000);
      });
    });
    events.addEventListener("log", received);
  }
  // The stream first, then the page: nothing falls between the two, and ids remove the overlap.
  connect();
  try {
    merge((await get("/api/logs", { limit: 100 })).records);
  } catch (error) {
    clear(rows, h("tr", null, h("td", { colSpan: 8 }, error.message)));
  }
  return () => { stopped = true; clearTimeout(retry); events.close(); };
}
