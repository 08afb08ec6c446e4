// API tokens: mint with scopes (the secret is shown once), list, revoke.
import { del, get, post, status } from "../api.js";
import { ago, badge, card, clear, confirmDanger, copyText, dialog, empty, formatDate, h, redraw, toast } from "../ui.js";

export const title = "API tokens";

const SCOPES = [
  ["storage:read", "Read files"], ["storage:write", "Upload and delete files"], ["assets:read", "Read the catalog"],
  ["insights:read", "Read analytics"], ["zones:read", "Read zones and domains"], ["zones:write", "Create and delete zones"],
  ["purge:write", "Purge caches"], ["pipeline:write", "Run the asset pipeline"], ["webhooks:read", "Read webhooks"],
  ["webhooks:write", "Manage webhooks"], ["ai:read", "AI endpoints"],
];

export async function render(container) {
  // A session mints tokens only with the scopes it may use itself (403 ScopeNotGrantable): the others are shown, not
  // offered. Unknown (an older control, or the status not read): every scope is offered, and the API decides.
  const grantable = await status().then((report) => report.dashboard.grantableScopes, () => null);
  const mayGrant = (scope) => !Array.isArray(grantable) || grantable.includes(scope);
  const name = h("input#token-name", { type: "text", placeholder: "e.g. ci-uploads", maxLength: 100, autocomplete: "off" });
  const expiry = h("select#token-expiry", null, [7, 30, 90, 365].map((d) => h("option", { value: d, defaultSelected: d === 90 }, `${d} days`)));
  // Each scope's description is written beside it (a title on hover cannot be read on a touch screen), and why some
  // cannot be chosen under the list.
  const scopes = h("div.checks#token-scopes", null, SCOPES.map(([scope, label]) => mayGrant(scope)
    ? h("label", { title: label }, h("input", { type: "checkbox", value: scope, name: "scope" }), h("code", null, scope),
      h("span.muted.small.scope-about", null, label))
    : h("label.muted", { title: `${label}: a dashboard session cannot grant it; mint such a token with the AccountKey (POST /api/tokens)` },
      h("input", { type: "checkbox", value: scope, name: "scope", disabled: true }), h("code", null, scope),
      h("span.small.scope-about", null, `${label} (AccountKey only)`))));
  const withheld = SCOPES.some(([scope]) => !mayGrant(scope));
  const formError = h("div.field-error#token-error");
  const form = h("form#token-form", { onsubmit: mint },
    h("div.row", null, h("label.field", null, "Name", name), h("label.field", null, "Expires after", expiry)),
    h("div", { style: "margin: 12px 0 6px" }, h("h3", null, "Scopes"), scopes,
      withheld ? h("p.muted.small#token-scopes-note", null,
        "A dashboard session cannot grant the scopes marked AccountKey only: mint such a token with the AccountKey (POST /api/tokens).") : null),
    formError, h("button.primary", { type: "submit" }, "Create token"));
  const list = h("div.table-wrap#token-list");
  container.append(card("New API token", null, h("p.muted.small", null,
    "Tokens authenticate scripts and CI as Authorization: Bearer cdnsk_…; each opens only its scopes. The secret is shown once."), form),
  card("Active tokens", null, list));

  async function load() {
    const answer = await get("/api/tokens");
    redraw(list, answer.tokens.length ? h("table", null,
      h("thead", null, h("tr", null, h("th", null, "Name"), h("th", null, "Prefix"), h("th", null, "Scopes"), h("th", null, "Created"), h("th", null, "Expires"), h("th", null, "Last used"), h("th"))),
      h("tbody", null, answer.tokens.map((t) => h("tr", { dataset: { id: t.id } },
        h("td", null, h("b", null, t.name)), h("td.mono", null, `${t.prefix}…`),
        h("td", null, h("div.chips", null, t.scopes.map((s) => badge(s, "info")))),
        h("td", null, formatDate(t.createdAt)), h("td", null, formatDate(t.expiresAt)), h("td", null, t.lastUsedAt ? ago(t.lastUsedAt) : "never"),
        h("td.actions", null, h("button.small.danger", { type: "button", onclick: () => revoke(t) }, "Revoke")))))) : empty("No active token."));
  }

  async function mint(event) {
    event.preventDefault();
    formError.textContent = "";
    const chosen = [...scopes.querySelectorAll("input:checked")].map((i) => i.value);
    if (!name.value.trim()) { formError.textContent = "Give the token a name."; return; }
    if (!chosen.length) { formError.textContent = "Choose at least one scope."; return; }
    let created;
    try {
      created = await post("/api/tokens", { name: name.value.trim(), scopes: chosen, expiresInDays: Number(expiry.value) });
    } catch (error) {
      formError.textContent = error.message;
      return;
    }
    form.reset();
    // The secret is shown whatever happens to the list: it cannot be shown again.
    const refreshed = load().catch((error) => clear(list, h("div.notice.error", null, `The list could not be refreshed: ${error.message}`)));
    const secret = h("input#token-secret", { type: "text", readOnly: true, value: created.token, "aria-label": "Token secret" });
    await dialog({
      title: `Token ${created.name} created`,
      body: h("div", null,
        h("p.notice", null, "Copy the secret now: only its hash is kept, so it cannot be shown again."),
        h("div.secret", null, secret, h("button", { type: "button", onclick: () => copyText(created.token) }, "Copy")),
        h("p.muted.small", null, `Scopes: ${created.scopes.join(", ")} · expires ${formatDate(created.expiresAt)}`)),
      actions: [{ label: "Done", value: true, class: "primary" }],
    });
    await refreshed;
  }

  async function revoke(token) {
    if (!(await confirmDanger({ title: `Revoke ${token.name}?`, message: "Calls with this token fail from now on.", confirmLabel: "Revoke" }))) return;
    try {
      await del("/api/tokens", { id: token.id });
      toast(`${token.name} revoked`);
      await load();
    } catch (error) {
      toast(error.message, "error");
    }
  }

  await load();
}
