// Zones: list, create (stored, or pulling from an origin), delete (typed confirmation), each zone's origin and
// each zone's custom domains.
import { ApiError, del, get, post, put } from "../api.js";
import { badge, card, clear, confirmDanger, empty, formatBytes, formatDate, formatNumber, h, redraw, toast } from "../ui.js";

export const title = "Zones";

const ZONE_NAME = /^[a-z0-9-]{2,64}$/;
// A request header's name as the API compares two of them: without case, `_` read as `-`.
const headerKey = (name) => name.toLowerCase().replaceAll("_", "-");

export async function render(container, { rest }) {
  const nameInput = h("input#zone-name", { type: "text", placeholder: "e.g. acme", autocomplete: "off", maxLength: 64 });
  const originInput = h("input#zone-origin", { type: "url", placeholder: "https://www.example.com", autocomplete: "off" });
  const createError = h("div.field-error#zone-error");
  // Each field named above it, as the origin panel's: a placeholder goes once the field holds a value.
  const form = h("form.row#zone-create", { onsubmit: create }, h("label.field", null, "Zone name", nameInput),
    h("label.field", null, "Origin URL (optional)", originInput), h("button.primary", { type: "submit" }, "Create zone"));
  const list = h("div.table-wrap#zone-list");
  const domains = h("div#zone-domains");
  container.append(
    card("All zones", [form], createError, h("p.muted.small", null,
      "A new zone gets the directories v1/banners, github, icons, logos and titles. Names: 2-64 lower-case letters, digits and hyphens. "
      + "With an origin URL it is a pull zone: the edges fetch its paths from that server and cache them by its headers."), list),
    domains);

  async function load() {
    let zones;
    try {
      zones = await get("/api/core/zones");
    } catch (error) {
      redraw(list, h("div.notice.error", null, error.message));
      return;
    }
    if (!zones.length) {
      redraw(list, empty("No zone yet: create the first one above."));
      return;
    }
    redraw(list, h("table", null,
      h("thead", null, h("tr", null, h("th", null, "Zone"), h("th.num", null, "Files"), h("th.num", null, "Storage"),
        h("th", null, "Categories"), h("th", null, "Created"), h("th", null, "Kind"), h("th", null, "State"), h("th"))),
      h("tbody", null, zones.map((zone) => h("tr", { dataset: { zone: zone.Name } },
        h("td", null, h("a", { href: `#/files/${encodeURIComponent(zone.Name)}/v1` }, h("b", null, zone.Name))),
        h("td.num", null, formatNumber(zone.FileCount)),
        h("td.num", null, formatBytes(zone.StorageUsed)),
        h("td", null, h("div.chips", null, (zone.Categories || []).map((c) => badge(c)))),
        h("td.nowrap", null, formatDate(zone.DateCreated)),
        h("td.kind", null, zone.Kind === "pull"
          ? [badge("pull"), h("div.muted.small", null, zone.Origin ? zone.Origin.Url : "")]
          : badge("storage")),
        h("td", null, zone.Suspended ? badge("suspended", "bad") : zone.Enabled ? badge("enabled", "ok") : badge("disabled", "warn")),
        h("td.actions", null,
          h("button.small", { type: "button", dataset: { action: "domains" }, onclick: () => showDomains(zone.Name) }, "Domains"),
          h("button.small", { type: "button", dataset: { action: "origin" }, onclick: () => showOrigin(zone.Name) }, "Origin"),
          h("a.button.small", { href: `#/files/${encodeURIComponent(zone.Name)}/v1` }, "Files"),
          h("button.small.danger", { type: "button", dataset: { action: "delete" }, onclick: () => remove(zone) }, "Delete")))))));
  }

  async function create(event) {
    event.preventDefault();
    const name = nameInput.value.trim();
    createError.textContent = "";
    if (!ZONE_NAME.test(name)) {
      createError.textContent = "2-64 characters: lower-case letters, digits and hyphens.";
      return;
    }
    const origin = originInput.value.trim();
    try {
      const created = await post("/api/core/zones", origin ? { Name: name, Origin: { Url: origin } } : { Name: name });
      toast(created.Message || `Zone ${created.Name || name} created`);
      nameInput.value = "";
      originInput.value = "";
      await load();
    } catch (error) {
      createError.textContent = error.message;
    }
  }

  // A zone's panel (its origin, its domains) below the list. Shown, it takes the focus (its heading: no on-screen keyboard
  // opens on a phone), so that the next Tab goes into it; its Close gives the focus back to the row's button that opened
  // it (`action`), not to the page's start.
  function showPanel(zone, action, title, tools, ...content) {
    const close = h("button.small", { type: "button", onclick: () => {
      clear(domains);
      list.querySelector(`tr[data-zone="${CSS.escape(zone)}"] button[data-action="${action}"]`)?.focus();
    } }, "Close");
    const panel = card(title, [tools, close], ...content);
    const heading = panel.querySelector("h2");
    heading.tabIndex = -1;
    clear(domains, panel);
    heading.focus({ preventScroll: true });
  }

  async function remove(zone) {
    const ok = await confirmDanger({
      title: `Delete the zone ${zone.Name}?`,
      message: `All ${formatNumber(zone.FileCount)} files of ${zone.Name} are removed in one commit, its domains are released and every edge purges them. This cannot be undone from the dashboard.`,
      confirmLabel: "Delete zone", typeToConfirm: zone.Name,
    });
    if (!ok) return;
    try {
      await del(`/api/core/zones/${encodeURIComponent(zone.Name)}`);
      toast(`Zone ${zone.Name} deleted`);
      clear(domains);
      await load();
    } catch (error) {
      toast(error.message, "error");
    }
  }

  // A zone's origin: where a pull zone's paths come from. The request headers' values are never shown back, so
  // saving sends those typed here; the ones set before are replaced (the form says which).
  async function showOrigin(zone) {
    const urlInput = h("input#origin-url", { type: "url", placeholder: "https://www.example.com/assets", autocomplete: "off" });
    const hostInput = h("input#origin-host", { type: "text", placeholder: "e.g. www.example.com", autocomplete: "off" });
    const headersInput = h("textarea#origin-headers", { rows: 3, placeholder: "X-Origin-Secret: value" });
    const cookies = h("input#origin-cookies", { type: "checkbox" });
    const error = h("div.field-error#origin-error");
    const state = h("p.small#origin-state");
    let current = null;
    const saveForm = h("form#origin-form", { onsubmit: save },
      // Each field named above it: a placeholder goes once the field holds a value.
      h("div.row", null, h("label.field.grow", null, "Origin URL", urlInput), h("label.field", null, "Host header (optional)", hostInput)),
      h("label.field", { style: "margin: 10px 0 6px" }, "Request headers (optional), one per line", headersInput),
      h("label.small", null, cookies, " Cache responses that set cookies"),
      h("div.row", null, h("button.primary", { type: "submit" }, "Save origin"),
        h("button.small.danger#origin-remove", { type: "button", onclick: removeOrigin }, "Stop pulling")));
    showPanel(zone, "origin", `Origin of ${zone}`, null, state, saveForm, error);

    function parsedHeaders() {
      const fields = {};
      for (const line of headersInput.value.split("\n")) {
        if (!line.trim()) continue;
        const at = line.indexOf(":");
        if (at < 1) throw new Error(`"${line.trim()}" is not "Name: value".`);
        const name = line.slice(0, at).trim();
        // Each name once (as the API compares them): a second line would silently replace the first's value.
        const other = Object.keys(fields).find((known) => headerKey(known) === headerKey(name));
        if (other !== undefined) throw new Error(`"${name}" is named twice (as "${other}" too): give each request header once.`);
        fields[name] = line.slice(at + 1).trim();
      }
      return fields;
    }

    // The zone's origin as the API has it now (null: none). Saving and stopping read it again: another tab or
    // operator may have changed it since this panel was shown.
    async function latestOrigin() {
      try {
        return await get(`/api/core/zones/${encodeURIComponent(zone)}/origin`);
      } catch (failure) {
        if (failure instanceof ApiError && failure.status === 404) return null;
        throw failure;
      }
    }

    /** `current` read again from the API; false (the reason shown) when it could not be. */
    async function takeLatest() {
      try {
        current = await latestOrigin();
        return true;
      } catch (failure) {
        error.textContent = failure.message;
        return false;
      }
    }

    async function refresh() {
      error.textContent = "";
      if (!(await takeLatest())) return;
      const origin = current && current.Origin;
      state.textContent = origin
        ? `${zone} pulls from ${origin.Url}${origin.HostHeader ? ` (Host: ${origin.HostHeader})` : ""}.`
          + (Object.keys(origin.RequestHeaders || {}).length
            ? ` It sends ${Object.keys(origin.RequestHeaders).join(", ")}; saving replaces them with the headers below.` : "")
        : `${zone} serves its stored files: save an origin URL to make it a pull zone.`;
      urlInput.value = origin ? origin.Url : "";
      hostInput.value = origin && origin.HostHeader ? origin.HostHeader : "";
      cookies.checked = !!(origin && origin.StoreSetCookie);
      headersInput.value = "";
    }

    async function save(event) {
      event.preventDefault();
      error.textContent = "";
      let headers;
      try {
        headers = parsedHeaders();
      } catch (failure) {
        error.textContent = failure.message;
        return;
      }
      if (!(await takeLatest())) return;
      const before = current && current.Origin ? Object.keys(current.Origin.RequestHeaders || {}) : [];
      const typed = new Set(Object.keys(headers).map(headerKey));
      const dropped = before.filter((name) => !typed.has(headerKey(name)));
      if (dropped.length && !(await confirmDanger({
        title: `Remove ${dropped.join(", ")}?`,
        message: `The values of ${dropped.join(", ")} are not shown back, so saving without typing them again removes them from ${zone}'s origin requests.`,
        confirmLabel: "Save without them",
      }))) return;
      const body = { Url: urlInput.value.trim(), StoreSetCookie: cookies.checked, RequestHeaders: headers };
      if (hostInput.value.trim()) body.HostHeader = hostInput.value.trim();
      try {
        const answer = await put(`/api/core/zones/${encodeURIComponent(zone)}/origin`, body);
        toast(answer.Message || `${zone} pulls from ${body.Url}`);
        await refresh();
        await load();
      } catch (failure) {
        error.textContent = failure.message;
      }
    }

    async function removeOrigin() {
      error.textContent = "";
      if (!(await takeLatest())) return;
      if (!current) {
        await refresh();
        error.textContent = `${zone} has no origin.`;
        return;
      }
      if (!(await confirmDanger({ title: `Stop pulling ${zone} from its origin?`, message: `${zone} serves its stored files again, and every edge purges what it cached from the origin.`, confirmLabel: "Stop pulling" }))) return;
      try {
        const answer = await del(`/api/core/zones/${encodeURIComponent(zone)}/origin`);
        toast(answer.Message || `${zone} no longer pulls`);
        await refresh();
        await load();
      } catch (failure) {
        error.textContent = failure.message;
      }
    }

    await refresh();
    domains.scrollIntoView({ behavior: "smooth", block: "nearest" });
  }

  async function showDomains(zone) {
    const hostInput = h("input#domain-hostname", { type: "text", placeholder: "assets.example.com", autocomplete: "off" });
    const addError = h("div.field-error");
    const table = h("div.table-wrap");
    const note = h("p.muted.small");
    const addForm = h("form.row#domain-add", {
      onsubmit: async (event) => {
        event.preventDefault();
        addError.textContent = "";
        try {
          const added = await post(`/api/core/zones/${encodeURIComponent(zone)}/domains`, { Hostname: hostInput.value });
          toast(added.Note || `Domain ${added.Hostname} added`);
          hostInput.value = "";
          await loadDomains();
        } catch (error) {
          addError.textContent = error.message;
        }
      },
    }, h("label.field", null, "Hostname", hostInput), h("button.primary", { type: "submit" }, "Add domain"));
    showPanel(zone, "domains", `Domains of ${zone}`, addForm, addError, note, table);

    // The certificate's state: until when it is valid, or the CA's reason and the next attempt.
    function certificateCell(d) {
      const kind = { active: "ok", failed: "bad" }[d.SslStatus] || "warn";
      const detail = d.SslError
        ? `${d.SslError}${d.SslRetryAt ? ` (next attempt ${formatDate(d.SslRetryAt)})` : ""}`
        : d.SslExpiresAt ? `valid until ${formatDate(d.SslExpiresAt)}` : "";
      return [badge(d.SslStatus, kind), detail ? h("div.muted", null, detail) : null];
    }

    async function loadDomains() {
      try {
        const answer = await get(`/api/core/zones/${encodeURIComponent(zone)}/domains`);
        note.textContent = `Point each domain at ${answer.CnameTarget} with a CNAME record. The zone is also served on its own host under the base domain.`;
        redraw(table, answer.Domains.length ? h("table", null,
          h("thead", null, h("tr", null, h("th", null, "Hostname"), h("th", null, "TLS"), h("th", null, "Added"), h("th"))),
          h("tbody", null, answer.Domains.map((d) => h("tr", { dataset: { name: d.Hostname } },
            h("td", null, h("b", null, d.Hostname)), h("td", null, certificateCell(d)),
            h("td", null, formatDate(d.DateCreated)),
            h("td.actions", null, h("button.small.danger", {
              type: "button",
              onclick: async () => {
                if (!(await confirmDanger({ title: `Remove ${d.Hostname}?`, message: `${d.Hostname} stops serving ${zone}.`, confirmLabel: "Remove" }))) return;
                try {
                  await del(`/api/core/zones/${encodeURIComponent(zone)}/domains/${encodeURIComponent(d.Hostname)}`);
                  await loadDomains();
                } catch (error) { toast(error.message, "error"); }
              },
            }, "Remove")))))) : empty("No custom domain."));
      } catch (error) {
        clear(table, h("div.notice.error", null, error instanceof ApiError ? error.message : String(error)));
      }
    }
    await loadDomains();
    domains.scrollIntoView({ behavior: "smooth", block: "nearest" });
  }

  await load();
  if (rest[0]) await showDomains(rest[0]);
}
