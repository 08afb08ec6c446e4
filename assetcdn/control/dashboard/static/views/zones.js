// Zones: list, create, delete (typed confirmation), and each zone's custom domains.
import { ApiError, del, get, post } from "../api.js";
import { badge, card, clear, confirmDanger, empty, formatBytes, formatDate, formatNumber, h, toast } from "../ui.js";

export const title = "Zones";

const ZONE_NAME = /^[a-z0-9-]{2,64}$/;

export async function render(container, { rest }) {
  const nameInput = h("input#zone-name", { type: "text", placeholder: "e.g. acme", autocomplete: "off", maxLength: 64, "aria-label": "Zone name" });
  const createError = h("div.field-error#zone-error");
  const form = h("form.row#zone-create", { onsubmit: create }, nameInput, h("button.primary", { type: "submit" }, "Create zone"));
  const list = h("div.table-wrap#zone-list");
  const domains = h("div#zone-domains");
  container.append(
    card("All zones", [form], createError, h("p.muted.small", null,
      "A new zone gets the directories v1/banners, github, icons, logos and titles. Names: 2-64 lower-case letters, digits and hyphens."), list),
    domains);

  async function load() {
    let zones;
    try {
      zones = await get("/api/core/zones");
    } catch (error) {
      clear(list, h("div.notice.error", null, error.message));
      return;
    }
    if (!zones.length) {
      clear(list, empty("No zone yet: create the first one above."));
      return;
    }
    clear(list, h("table", null,
      h("thead", null, h("tr", null, h("th", null, "Zone"), h("th.num", null, "Files"), h("th.num", null, "Storage"),
        h("th", null, "Categories"), h("th", null, "Created"), h("th", null, "State"), h("th"))),
      h("tbody", null, zones.map((zone) => h("tr", { dataset: { zone: zone.Name } },
        h("td", null, h("a", { href: `#/files/${encodeURIComponent(zone.Name)}/v1` }, h("b", null, zone.Name))),
        h("td.num", null, formatNumber(zone.FileCount)),
        h("td.num", null, formatBytes(zone.StorageUsed)),
        h("td", null, h("div.chips", null, (zone.Categories || []).map((c) => badge(c)))),
        h("td.nowrap", null, formatDate(zone.DateCreated)),
        h("td", null, zone.Suspended ? badge("suspended", "bad") : zone.Enabled ? badge("enabled", "ok") : badge("disabled", "warn")),
        h("td.actions", null,
          h("button.small", { type: "button", onclick: () => showDomains(zone.Name) }, "Domains"),
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
    try {
      const created = await post("/api/core/zones", { Name: name });
      toast(`Zone ${created.Name || name} created`);
      nameInput.value = "";
      await load();
    } catch (error) {
      createError.textContent = error.message;
    }
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

  async function showDomains(zone) {
    const hostInput = h("input#domain-hostname", { type: "text", placeholder: "assets.example.com", autocomplete: "off", "aria-label": "Hostname" });
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
    }, hostInput, h("button.primary", { type: "submit" }, "Add domain"));
    clear(domains, card(`Domains of ${zone}`, [addForm, h("button.small", { type: "button", onclick: () => clear(domains) }, "Close")], addError, note, table));

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
        clear(table, answer.Domains.length ? h("table", null,
          h("thead", null, h("tr", null, h("th", null, "Hostname"), h("th", null, "TLS"), h("th", null, "Added"), h("th"))),
          h("tbody", null, answer.Domains.map((d) => h("tr", null,
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
