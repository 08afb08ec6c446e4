// Webhooks: register (the signing secret is shown once), delete, and per webhook its recent
// deliveries and dead letters, which can be replayed.
import { del, get, post, status } from "../api.js";
import { ago, badge, card, clear, confirmDanger, copyText, dialog, empty, formatDate, h, redraw, toast } from "../ui.js";

export const title = "Webhooks";

const EVENTS = ["asset.created", "asset.updated", "asset.deleted", "zone.created", "zone.deleted", "purge.completed",
                "pipeline.completed", "rules.updated"];

/** What happens to a failed delivery, from `[webhooks] retry_delays_s` of the running control. */
function retryNote(delays) {
  if (!Array.isArray(delays)) return "Failed deliveries are retried, then kept as dead letters.";
  if (!delays.length) return "Failed deliveries are not retried: they are kept as dead letters.";
  const listed = delays.length === 1 ? String(delays[0])
    : `${delays.slice(0, -1).join(", ")} and ${delays[delays.length - 1]}`;
  return `Failed deliveries are retried after ${listed} s, then kept as dead letters.`;
}

function stateBadge(state) {
  return badge(state, state === "delivered" ? "ok" : state === "dead" ? "bad" : "warn");
}

/**
 * A delivery's last answer: its HTTP status, with the error text written out under it when that says more (it was a
 * title, on hover only); the error alone when there was no answer.
 */
function lastAnswer(d) {
  const answer = d.lastStatus ? `HTTP ${d.lastStatus}` : "";
  const more = d.lastError && d.lastError !== answer ? d.lastError : "";
  if (!answer) return h("td.answer", null, more || "–");
  return h("td.answer", null, answer, more ? h("div.small.muted", null, more) : null);
}

export async function render(container, { rest }) {
  let hooks;
  try {
    hooks = (await get("/api/webhooks")).webhooks;
  } catch (error) {
    container.append(card("Webhooks", null, h("div.notice.error", null,
      error.status === 404 ? "This control plane has no webhooks API." : error.message)));
    return undefined;
  }
  const delays = await status().then((report) => report.dashboard.webhookRetryDelaysS, () => null);
  let selected = rest[0] || (hooks[0] && hooks[0].id) || null;
  const url = h("input#webhook-url", { type: "url", placeholder: "https://hooks.example.com/assetcdn", autocomplete: "off", "aria-label": "URL" });
  const events = h("div.checks#webhook-events", null, EVENTS.map((e) =>
    h("label", null, h("input", { type: "checkbox", value: e, defaultChecked: true }), h("code", null, e))));
  const formError = h("div.field-error#webhook-error");
  const form = h("form#webhook-form", { onsubmit: register },
    h("label.field", null, "Receiver URL (https)", url), h("div", { style: "margin: 12px 0 6px" }, h("h3", null, "Events"), events),
    formError, h("button.primary", { type: "submit" }, "Register webhook"));
  const list = h("div.table-wrap#webhook-list");
  const detail = h("div#webhook-detail", { style: "display: flex; flex-direction: column; gap: 18px" });
  container.append(card("New webhook", null, h("p.muted.small", null,
    "Each event is POSTed as {event, timestamp, data} with X-Webhook-Signature: sha256=<HMAC of the body>. ",
    h("span#webhook-retries", null, retryNote(delays))), form),
  card("Registered webhooks", null, list), detail);

  async function load() {
    hooks = (await get("/api/webhooks")).webhooks;
    if (selected && !hooks.some((w) => w.id === selected)) selected = hooks[0] ? hooks[0].id : null;
    redraw(list, hooks.length ? h("table", null,
      h("thead", null, h("tr", null, h("th", null, "URL"), h("th", null, "Events"), h("th", null, "Secret"), h("th", null, "Created"), h("th"))),
      h("tbody", null, hooks.map((w) => h(`tr${w.id === selected ? ".selected" : ""}`, { dataset: { id: w.id } },
        h("td.mono", null, w.url),
        h("td", null, h("div.chips", null, w.events.length === EVENTS.length ? badge(`all ${EVENTS.length} events`, "info")
          : w.events.map((e) => badge(e, "info")))),
        h("td.mono", null, w.secretLastFour ? `…${w.secretLastFour}` : "set"),
        h("td.nowrap", null, formatDate(w.createdAt)),
        h("td.actions", null,
          h("button.small", { type: "button", "aria-pressed": String(w.id === selected), onclick: () => { selected = w.id; load(); } }, "Deliveries"),
          h("button.small.danger", { type: "button", onclick: () => remove(w) }, "Delete")))))) : empty("No webhook registered."));
    await loadDeliveries();
  }

  async function loadDeliveries() {
    if (!selected) { redraw(detail); return; }
    const hook = hooks.find((w) => w.id === selected);
    const [{ deliveries }, { deadLetters }] = await Promise.all([
      get("/api/webhooks/deliveries", { id: selected, limit: 50 }), get("/api/webhooks/dead-letters", { id: selected, limit: 50 })]);
    const table = (rows, dead) => rows.length ? h("div.table-wrap", null, h("table", null,
      h("thead", null, h("tr", null, h("th", null, "Event"), h("th", null, "State"), h("th.num", null, "Attempts"), h("th", null, "Last answer"),
        h("th", null, "Created"), h("th", null, dead ? "Failed" : "Updated"), dead ? null : h("th", null, "Next attempt"), h("th"))),
      h("tbody", null, rows.map((d) => h("tr", { dataset: { id: d.id, state: d.state } },
        h("td", null, h("code", null, d.event)), h("td", null, stateBadge(d.state)), h("td.num", null, String(d.attempts)),
        lastAnswer(d),
        h("td.nowrap", null, formatDate(d.createdAt)), h("td.nowrap", null, ago(d.updatedAt)),
        dead ? null : h("td.nowrap", null, d.nextAttemptAt ? formatDate(d.nextAttemptAt) : "–"),
        h("td.actions", null, dead ? h("button.small", { type: "button", onclick: () => replay(d) }, "Replay") : null)))))) : empty(dead ? "No dead letter." : "No delivery yet.");
    redraw(detail,
      card(`Deliveries to ${hook ? hook.url : selected}`, null, table(deliveries, false)),
      card("Dead letters", [deadLetters.length ? badge(`${deadLetters.length}`, "bad") : null],
        h("p.muted.small", null, "Deliveries whose every retry failed. Replay sends one again, with its retries anew."), table(deadLetters, true)));
  }

  async function register(event) {
    event.preventDefault();
    formError.textContent = "";
    const chosen = [...events.querySelectorAll("input:checked")].map((i) => i.value);
    let created;
    try {
      created = await post("/api/webhooks", { url: url.value.trim(), events: chosen });
    } catch (error) {
      formError.textContent = error.message;
      return;
    }
    form.reset();
    selected = created.id;
    // The secret is shown whatever happens to the list: it cannot be shown again.
    const refreshed = load().catch((error) => clear(list, h("div.notice.error", null, `The list could not be refreshed: ${error.message}`)));
    await dialog({
      title: "Webhook registered",
      body: h("div", null, h("p.notice", null, "Copy the signing secret now: it is stored encrypted and cannot be shown again."),
        h("div.secret", null, h("input#webhook-secret", { type: "text", readOnly: true, value: created.secret, "aria-label": "Signing secret" }),
          h("button", { type: "button", onclick: () => copyText(created.secret) }, "Copy"))),
      actions: [{ label: "Done", value: true, class: "primary" }],
    });
    await refreshed;
  }

  async function remove(hook) {
    if (!(await confirmDanger({ title: "Delete this webhook?", message: `${hook.url} receives nothing from now on; deliveries in flight are cancelled.` }))) return;
    try {
      await del("/api/webhooks", { id: hook.id });
      toast("Webhook deleted");
      await load();
    } catch (error) {
      toast(error.message, "error");
    }
  }

  async function replay(delivery) {
    try {
      await post("/api/webhooks/replay", { id: delivery.id });
      toast(`${delivery.event} queued again`);
      await loadDeliveries();
    } catch (error) {
      toast(error.message, "error");
    }
  }

  await load();
  const timer = setInterval(() => { loadDeliveries().catch(() => {}); }, 5000);
  return () => clearInterval(timer);
}
