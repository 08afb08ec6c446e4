// Passkeys: add one with this device (navigator.credentials), rename, remove. The WebAuthn
// ceremonies are the sign-in page's (window.assetcdnPasskeys from /dashboard/login.js).
import { card, clear, confirmDanger, dialog, empty, formatDate, h, redraw, toast, ago, badge } from "../ui.js";

export const title = "Passkeys";

function helpers() {
  return window.assetcdnPasskeys;
}

function passkeysWorkHere() {
  const rpId = document.body.dataset.rpId || "";
  const host = location.hostname;
  return typeof PublicKeyCredential !== "undefined" && rpId && (host === rpId || host.endsWith(`.${rpId}`));
}

export async function render(container) {
  const name = h("input#new-passkey-name", { type: "text", maxLength: 100, placeholder: "e.g. MacBook Touch ID", autocomplete: "off", "aria-label": "Passkey name" });
  const add = h("button.primary#new-passkey-add", { type: "submit" }, "Add a passkey");
  const note = h("p.small#passkey-note");
  const list = h("div.table-wrap#passkey-table");
  const form = h("form.row", { onsubmit: register }, name, add);
  container.append(card("Passkeys", null,
    h("p.muted.small", null, "Sign in with this device's screen lock or a security key instead of the password. Passkeys are tied to ",
      h("code", null, document.body.dataset.rpId || "?"), "."), form, note), card("Registered passkeys", null, list));

  if (!passkeysWorkHere()) {
    add.disabled = true;
    const elsewhere = document.body.dataset.passkeyOrigin;
    if (!window.isSecureContext) clear(note, "Passkeys need HTTPS: browsers offer them over plain HTTP only on localhost.");
    else clear(note, "Browsers allow passkeys only on a domain name, not on an IP address. ",
      elsewhere ? h("a", { href: `${elsewhere}/dashboard/#/passkeys` }, `Open the dashboard at ${elsewhere}`) : "Set [dashboard] passkey_rp_id.",
      " to add one.");
  }

  async function load() {
    const items = await helpers().list();
    redraw(list, items.length ? h("table", null,
      h("thead", null, h("tr", null, h("th", null, "Name"), h("th", null, "Kind"), h("th", null, "Added"), h("th", null, "Last used"), h("th"))),
      h("tbody", null, items.map((p) => h("tr", { dataset: { id: p.id, name: p.name } },
        h("td", null, h("b", null, p.name)),
        h("td", null, h("div.chips", null, badge(p.deviceType === "multi_device" ? "synced" : "this device only"), p.backedUp ? badge("backed up", "ok") : null,
          badge(p.algorithm))),
        h("td", null, formatDate(p.createdAt)),
        h("td", null, p.lastUsedAt ? ago(p.lastUsedAt) : "never"),
        h("td.actions", null,
          h("button.small", { type: "button", onclick: () => rename(p) }, "Rename"),
          h("button.small.danger", { type: "button", onclick: () => remove(p) }, "Remove")))))) : empty("No passkey yet."));
  }

  async function register(event) {
    event.preventDefault();
    add.disabled = true;
    note.className = "small muted";
    note.textContent = "Follow your browser's prompt…";
    try {
      const added = await helpers().register(name.value.trim());
      note.textContent = "";
      toast(`Passkey "${added.name}" added`);
      name.value = "";
      await load();
    } catch (error) {
      note.className = "small field-error";
      note.textContent = `Could not add the passkey: ${error.message}`;
    } finally {
      add.disabled = false;
    }
  }

  async function rename(passkey) {
    const input = h("input", { type: "text", value: passkey.name, maxLength: 100, "aria-label": "New name" });
    const choice = await dialog({ title: "Rename passkey", body: h("label.field", null, "Name", input),
      actions: [{ label: "Cancel", value: null }, { label: "Rename", value: "rename", class: "primary" }] });
    if (choice !== "rename" || !input.value.trim()) return;
    try {
      await helpers().rename(passkey.id, input.value.trim());
      await load();
    } catch (error) {
      toast(error.message, "error");
    }
  }

  async function remove(passkey) {
    if (!(await confirmDanger({ title: `Remove ${passkey.name}?`, message: "It can no longer be used to sign in. The password still works.", confirmLabel: "Remove" }))) return;
    try {
      await helpers().remove(passkey.id);
      toast(`${passkey.name} removed`);
      await load();
    } catch (error) {
      toast(error.message, "error");
    }
  }

  if (!helpers()) {
    // login.js is a deferred classic script; modules run after it, but be safe.
    await new Promise((resolve) => window.addEventListener("load", resolve, { once: true }));
  }
  await load();
  return undefined;
}
