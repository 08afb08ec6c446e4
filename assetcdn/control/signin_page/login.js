// Passkeys in the browser (navigator.credentials) for the sign-in and passkey pages. No dependencies.
// window.assetcdnPasskeys is the programmatic face the dashboard can reuse:
//   signIn(), register(name), list(), rename(id, name), remove(id).
"use strict";
(() => {
  const fromB64url = (text) => {
    const base64 = text.replace(/-/g, "+").replace(/_/g, "/");
    const binary = atob(base64 + "=".repeat((4 - (base64.length % 4)) % 4));
    return Uint8Array.from(binary, (c) => c.charCodeAt(0)).buffer;
  };
  const toB64url = (buffer) => {
    let binary = "";
    for (const byte of new Uint8Array(buffer)) binary += String.fromCharCode(byte);
    return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  };

  async function api(method, path, body) {
    const init = { method, credentials: "same-origin", headers: {} };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(path, init);
    let data = null;
    if (response.status !== 204) {
      try { data = await response.json(); } catch { data = null; }
    }
    if (!response.ok) {
      const message = (data && (data.Message || (data.error && data.error.message) || data.error))
        || `${response.status} ${response.statusText}`;
      const error = new Error(message);
      error.status = response.status;
      throw error;
    }
    return data;
  }

  const descriptors = (list) => (list || []).map((c) => ({ ...c, id: fromB64url(c.id) }));

  function creationOptions(json) {
    return { ...json, challenge: fromB64url(json.challenge), user: { ...json.user, id: fromB64url(json.user.id) },
             excludeCredentials: descriptors(json.excludeCredentials) };
  }

  function requestOptions(json) {
    return { ...json, challenge: fromB64url(json.challenge), allowCredentials: descriptors(json.allowCredentials) };
  }

  function credentialJSON(credential) {
    const r = credential.response;
    const response = { clientDataJSON: toB64url(r.clientDataJSON) };
    if (r.attestationObject) {
      response.attestationObject = toB64url(r.attestationObject);
      response.transports = typeof r.getTransports === "function" ? r.getTransports() : [];
    } else {
      response.authenticatorData = toB64url(r.authenticatorData);
      response.signature = toB64url(r.signature);
      if (r.userHandle) response.userHandle = toB64url(r.userHandle);
    }
    return { id: credential.id, rawId: toB64url(credential.rawId), type: credential.type, response,
             clientExtensionResults: credential.getClientExtensionResults(),
             authenticatorAttachment: credential.authenticatorAttachment || undefined };
  }

  async function signIn() {
    const options = await api("POST", "/api/passkeys/auth/begin");
    const credential = await navigator.credentials.get({ publicKey: requestOptions(options) });
    return api("POST", "/api/passkeys/auth/complete", { credential: credentialJSON(credential) });
  }

  async function register(name) {
    const options = await api("POST", "/api/passkeys/register/begin");
    const credential = await navigator.credentials.create({ publicKey: creationOptions(options) });
    return api("POST", "/api/passkeys/register/complete", { credential: credentialJSON(credential), name });
  }

  const passkeys = {
    signIn, register,
    list: async () => (await api("GET", "/api/passkeys")).passkeys,
    rename: (id, name) => api("PATCH", `/api/passkeys?id=${encodeURIComponent(id)}`, { name }),
    remove: (id) => api("DELETE", `/api/passkeys?id=${encodeURIComponent(id)}`),
  };
  window.assetcdnPasskeys = passkeys;

  // --- page wiring ---------------------------------------------------------------------------
  const body = document.body;
  const status = document.getElementById("passkey-status");
  const say = (text, isError = false) => {
    if (!status) return;
    status.textContent = text;
    status.classList.toggle("error", isError);
  };

  // Passkeys belong to a domain (the relying-party id); on any other host (an IP address) the browser
  // refuses them, so point at the origin where they work.
  const rpId = body.dataset.rpId || "";
  const host = location.hostname;
  const passkeysHere = typeof PublicKeyCredential !== "undefined" && (host === rpId || host.endsWith(`.${rpId}`));
  if (!passkeysHere && status) {
    const elsewhere = body.dataset.passkeyOrigin;
    say(!window.isSecureContext ? "Passkeys need HTTPS: browsers offer them over plain HTTP only on localhost."
      : elsewhere && elsewhere !== location.origin ? `Passkeys work at ${elsewhere}${location.pathname}`
        : "Passkeys are not available here.");
    document.querySelectorAll("#passkey-signin, #passkey-add button").forEach((b) => { b.disabled = true; });
  }

  const signInButton = document.getElementById("passkey-signin");
  if (signInButton && passkeysHere) {
    signInButton.addEventListener("click", async () => {
      signInButton.disabled = true;
      say("Waiting for your passkey…");
      try {
        await signIn();
        location.assign("/dashboard/");
      } catch (error) {
        say(`Passkey sign-in failed: ${error.message}`, true);
        signInButton.disabled = false;
      }
    });
  }

  const list = document.getElementById("passkey-list");
  async function showList() {
    if (!list) return;
    const items = await passkeys.list();
    list.replaceChildren(...items.map((p) => {
      const item = document.createElement("li");
      item.dataset.id = p.id;
      const name = document.createElement("span");
      name.className = "name";
      name.textContent = p.name;
      const meta = document.createElement("span");
      meta.className = "meta";
      meta.textContent = `added ${p.createdAt.slice(0, 10)}` + (p.lastUsedAt ? `, used ${p.lastUsedAt.slice(0, 10)}` : "");
      const rename = document.createElement("button");
      rename.className = "small secondary";
      rename.type = "button";
      rename.textContent = "Rename";
      rename.addEventListener("click", async () => {
        const next = prompt("New name", p.name);
        if (next === null) return;
        try { await passkeys.rename(p.id, next); await showList(); } catch (error) { say(error.message, true); }
      });
      const remove = document.createElement("button");
      remove.className = "small secondary";
      remove.type = "button";
      remove.textContent = "Remove";
      remove.addEventListener("click", async () => {
        if (!confirm(`Remove the passkey "${p.name}"? It can no longer be used to sign in.`)) return;
        try { await passkeys.remove(p.id); await showList(); } catch (error) { say(error.message, true); }
      });
      item.append(name, meta, rename, remove);
      return item;
    }));
    if (!items.length) {
      const empty = document.createElement("li");
      empty.textContent = "No passkey yet.";
      list.append(empty);
    }
  }

  const addForm = document.getElementById("passkey-add");
  if (addForm) {
    addForm.addEventListener("submit", async (event) => {
      event.preventDefault();
      say("Follow your browser's prompt…");
      try {
        const added = await register(addForm.elements.name.value);
        say(`Passkey "${added.name}" added.`);
        addForm.reset();
        await showList();
      } catch (error) {
        say(`Could not add the passkey: ${error.message}`, true);
      }
    });
  }
  if (list) showList().catch((error) => say(error.message, true));
})();
