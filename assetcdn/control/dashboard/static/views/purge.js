// Purge: by URL, by path prefix, by cache tag (in every zone, or within one), or everything, each hard or soft
// (marked stale: a pull zone's copies are revalidated with the origin). The answer says, per edge node, whether it
// acknowledged within the wait, how many cache entries it dropped and how long its ack took.
import { ApiError, get, post, publicUrl } from "../api.js";
import { badge, card, clear, confirmDanger, formatDate, formatNumber, h } from "../ui.js";

export const title = "Purge";

const purges = []; // this page's purges, newest first (kept while the dashboard is open)

export async function render(container, { params }) {
  let mode = params.get("tag") ? "tags" : params.get("prefix") ? "prefixes" : params.get("everything") ? "everything" : "urls";
  const base = await publicUrl();
  const tabs = h("div.segmented#purge-mode");
  const urls = h("textarea#purge-urls", { rows: 5, placeholder: `${base}/acme/v1/logos/logo.png\n/acme/v1/banners/hero.webp`, "aria-label": "URLs" });
  if (params.get("url")) urls.value = params.get("url");
  const prefixes = h("textarea#purge-prefixes", { rows: 3, placeholder: `/acme/v1/logos/\n${base}/acme/v1/banners/`, "aria-label": "Path prefixes" });
  if (params.get("prefix")) prefixes.value = params.get("prefix");
  const soft = h("input#purge-soft", { type: "checkbox" });
  const tags = h("input#purge-tags", { type: "text", placeholder: "project-acme, type-logos", "aria-label": "Tags" });
  if (params.get("tag")) tags.value = params.get("tag");
  // "All zones" sends no zone; a zone is sent beside tags only (the API refuses it beside the other modes).
  const zone = h("select#purge-zone", null, h("option", { value: "" }, "All zones"));
  const suggestions = h("div.chips");
  const everything = h("p", null, "Every edge empties its whole cache; the next requests for every asset go to control. Use it after changing many files at once.");
  const body = h("div");
  const error = h("div.field-error#purge-error");
  const submit = h("button.primary#purge-submit", { type: "button", onclick: run }, "Purge");
  const result = h("div#purge-result");
  const past = h("div#purge-history");

  // The buttons are made once and marked: one drawn anew would take the focus away from the keyboard's choice.
  tabs.append(...[["urls", "By URL"], ["prefixes", "By prefix"], ["tags", "By tag"], ["everything", "Everything"]].map(([key, label]) =>
    h("button", { type: "button", dataset: { mode: key }, onclick: () => { mode = key; showMode(); } }, label)));
  function showMode() {
    for (const button of tabs.children) {
      button.classList.toggle("active", button.dataset.mode === mode);
      button.setAttribute("aria-pressed", String(button.dataset.mode === mode));
    }
    clear(body,
      mode === "urls" ? h("label.field", null, "URLs or paths, one per line (at most 30)", urls)
        : mode === "prefixes" ? h("label.field", null, "Path prefixes (/<zone>/... or a URL), one per line (at most 30): every path under each", prefixes)
        : mode === "tags" ? [h("label.field", null, "Cache tags, separated by commas or spaces (at most 30)", tags), suggestions,
          h("label.field", null, "Zone: the tags' copies in every zone, or in this zone only", zone)]
          : everything);
    submit.textContent = mode === "everything" ? "Purge everything…" : "Purge";
    submit.classList.toggle("danger", mode === "everything");
    error.textContent = "";
  }

  get("/api/core/zones").then((zones) => {
    zone.append(...zones.map((z) => h("option", { value: z.Name }, z.Name)));
    const known = ["all-assets", ...zones.map((z) => `project-${z.Name}`), "type-logos", "type-banners", "type-icons", "format-png", "format-webp", "format-svg"];
    clear(suggestions, h("span.muted.small", null, "Tags: "), known.map((tag) => h("button.small", {
      type: "button", onclick: () => { tags.value = [...new Set([...tags.value.split(/[\s,]+/).filter(Boolean), tag])].join(", "); },
    }, tag)));
  }).catch(() => {});

  async function run() {
    error.textContent = "";
    let command;
    if (mode === "urls") {
      const list = urls.value.split("\n").map((u) => u.trim()).filter(Boolean);
      if (!list.length) { error.textContent = "Enter at least one URL or path."; return; }
      command = { urls: list };
    } else if (mode === "prefixes") {
      const list = prefixes.value.split("\n").map((p) => p.trim()).filter(Boolean);
      if (!list.length) { error.textContent = "Enter at least one prefix."; return; }
      command = { prefixes: list };
    } else if (mode === "tags") {
      const list = tags.value.split(/[\s,]+/).filter(Boolean);
      if (!list.length) { error.textContent = "Enter at least one tag."; return; }
      command = { tags: list };
      if (zone.value) command.zone = zone.value;
    } else {
      if (!(await confirmDanger({ title: "Purge everything?", message: soft.checked ? "Every pull zone copy on every edge is marked stale (revalidated with its origin at its next request); stored zones' cached files are dropped." : "Every cached asset on every edge is dropped.", confirmLabel: "Purge everything" }))) return;
      command = { purge_everything: true };
    }
    if (soft.checked) command.soft = true;
    submit.disabled = true;
    try {
      const answer = await post("/api/purge", command);
      purges.unshift({ at: answer.dateCreated, answer });
      showResult(answer);
      showHistory();
    } catch (failure) {
      const invalid = failure instanceof ApiError ? failure.invalid : [];
      error.textContent = failure.message + (invalid.length ? `: ${invalid.join(", ")}` : "");
    } finally {
      submit.disabled = false;
    }
  }

  /** What a purge named: its URLs, prefixes or tags (with the zone a tag purge was scoped to), or everything. */
  const named = (answer) => (answer.purged === "everything" ? "everything" : answer.purged.join(", "))
    + (answer.zone ? ` in zone ${answer.zone}` : "");

  function showResult(answer) {
    const edges = answer.edges || {};
    const latency = edges.latencyMs || {};
    const removed = edges.entriesRemoved || {};
    const nodes = [...(edges.acknowledged || []).map((n) => [n, true]), ...(edges.pending || []).map((n) => [n, false])];
    const perNode = (table, node, pick) => {
      const values = Object.entries(table).filter(([member]) => member.split("/")[0] === node).map(([, v]) => v);
      return values.length ? pick(values) : null;
    };
    const what = named(answer)
      + (answer.mode === "prefixes" ? " (and every path under it)" : "") + (answer.soft ? " (soft: marked stale)" : "");
    clear(result, card("Result", [badge(edges.pending && edges.pending.length ? "partly acknowledged" : "acknowledged by every edge",
      edges.pending && edges.pending.length ? "warn" : "ok")],
    h("p", null, h("b", null, "Purged: "), what),
    h("p.muted.small", null, `Generation ${answer.generation} · ${formatDate(answer.dateCreated)} · ${"remaining_today" in answer ? `${answer.remaining_today} purges left today` : "no daily purge limit"} · `,
      `all acknowledgements within ${Math.round(edges.elapsedMs || 0)} ms. ${answer.note || ""}`),
    nodes.length ? h("div.table-wrap", null, h("table#purge-edges", null,
      h("thead", null, h("tr", null, h("th", null, "Edge"), h("th", null, "Acknowledged"), h("th.num", null, "Entries removed"), h("th.num", null, "Ack latency"))),
      h("tbody", null, nodes.map(([node, acked]) => {
        const ms = perNode(latency, node, (v) => Math.max(...v));
        const dropped = perNode(removed, node, (v) => v.reduce((a, b) => a + b, 0));
        return h("tr", { dataset: { edge: node } },
          h("td", null, h("b", null, node)),
          h("td", null, acked ? badge("acknowledged", "ok") : badge("pending: applies it on catch-up", "warn")),
          h("td.num", null, dropped === null ? "–" : formatNumber(dropped)),
          h("td.num", null, ms === null ? "–" : `${ms.toFixed(1)} ms`));
      })))) : h("p.notice", null, "No edge is registered: nothing to acknowledge.")));
  }

  function showHistory() {
    if (!purges.length) { clear(past); return; }
    clear(past, card("Earlier purges in this session", null, h("div.table-wrap", null, h("table", null,
      h("thead", null, h("tr", null, h("th", null, "When"), h("th", null, "What"), h("th.num", null, "Edges"), h("th.num", null, "Slowest ack"))),
      h("tbody", null, purges.map(({ answer }) => {
        const values = Object.values((answer.edges || {}).latencyMs || {});
        return h("tr", null, h("td", null, formatDate(answer.dateCreated)),
          h("td.mono", null, named(answer) + (answer.soft ? " (soft)" : "")),
          h("td.num", null, `${(answer.edges.acknowledged || []).length}/${answer.edges.total}`),
          h("td.num", null, values.length ? `${Math.max(...values).toFixed(1)} ms` : "–"));
      }))))));
  }

  container.append(card("Purge the edge caches", [tabs], body,
    h("label.small", null, soft, " Soft: mark stale instead of dropping (a pull zone's copy is revalidated with its origin; a stored zone's is dropped)"),
    error, h("div.row", null, submit,
    h("span.muted.small", null, "URL purges also drop every transform and placeholder derived from the file."))), result, past);
  showMode();
  showHistory();
}
