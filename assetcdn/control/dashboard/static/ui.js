// Small DOM helpers shared by the views. Text always goes in through textContent, never innerHTML:
// names, paths and log lines come from users and must not become markup.

const SVG_NS = "http://www.w3.org/2000/svg";

/** h("button.primary#save", {onclick, type: "button"}, "Save") -> element. */
export function h(tag, props, ...children) {
  const [name, ...rest] = tag.split(/(?=[.#])/);
  const el = document.createElement(name || "div");
  for (const part of rest) {
    if (part.startsWith(".")) el.classList.add(part.slice(1));
    else el.id = part.slice(1);
  }
  applyProps(el, props);
  append(el, children);
  return el;
}

/** The same for SVG elements (charts, icons). */
export function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value !== undefined && value !== null && value !== false) el.setAttribute(key, String(value));
  }
  append(el, children);
  return el;
}

function applyProps(el, props) {
  if (!props) return;
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key === "class") el.className = value;
    else if (key in el && key !== "list" && key !== "form") el[key] = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function clear(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** Where the focus is in `container`, to find it again once the container is drawn anew: its row and its words. */
function focusPlace(container) {
  const focused = document.activeElement;
  if (!focused || focused === container || !container.contains(focused)) return null;
  const row = focused.closest("tr");
  const rowKey = (tr) => (tr ? tr.dataset.id ?? tr.dataset.zone ?? tr.dataset.name ?? null : null);
  return { row: row && container.contains(row) ? rowKey(row) : null, tag: focused.tagName, text: focused.textContent, rowKey };
}

/**
 * `clear`, for what is drawn again while it may hold the focus (a list after a change, a table refreshed on a timer): the
 * button that had it (the same words, in the row of the same id) has it again, so that the keyboard keeps its place.
 * When it is gone (its row deleted), the container takes the focus: the next Tab goes on from there, not from the page's
 * start.
 */
export function redraw(container, ...children) {
  const place = focusPlace(container);
  clear(container, ...children);
  if (!place) return container;
  const again = [...container.querySelectorAll(place.tag)].find((el) => el.textContent === place.text
    && place.rowKey(el.closest("tr")) === place.row);
  if (again) {
    again.focus({ preventScroll: true });
  } else {
    container.tabIndex = -1;
    container.focus({ preventScroll: true });
  }
  return container;
}

// --- formatting -----------------------------------------------------------------------------
export function formatBytes(bytes) {
  if (bytes === null || bytes === undefined || Number.isNaN(bytes)) return "–";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let value = Number(bytes);
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
  return `${unit === 0 ? value : value.toFixed(value < 10 ? 1 : 0)} ${units[unit]}`;
}

export function formatNumber(n) {
  return n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US");
}

export function formatDate(iso) {
  if (!iso) return "–";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return iso;
  return date.toLocaleString("en-GB", { year: "numeric", month: "short", day: "2-digit", hour: "2-digit", minute: "2-digit" });
}

export function formatTime(iso) {
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return iso || "";
  return date.toLocaleTimeString("en-GB", { hour12: false }) + "." + String(date.getMilliseconds()).padStart(3, "0");
}

export function ago(iso) {
  if (!iso) return "never";
  const seconds = Math.max(0, (Date.now() - new Date(iso).getTime()) / 1000);
  if (seconds < 60) return `${Math.round(seconds)} s ago`;
  if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.round(seconds / 3600)} h ago`;
  return `${Math.round(seconds / 86400)} d ago`;
}

export function duration(seconds) {
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

// --- feedback -------------------------------------------------------------------------------
export function toast(message, kind = "info") {
  const box = document.getElementById("toasts");
  const item = h(`div.toast${kind === "error" ? ".error" : ""}`, null, message);
  box.append(item);
  setTimeout(() => item.remove(), kind === "error" ? 7000 : 3500);
}

let dialogs = 0; // dialogs opened: each title's id

/**
 * A modal dialog; resolves with the value of the button pressed (or null when dismissed). The focus goes to its first
 * field, else to the action marked `focus`, else to the last action.
 */
export function dialog({ title, body, actions }) {
  return new Promise((resolve) => {
    const buttons = actions.map((a) => h(`button${a.class ? "." + a.class.split(" ").join(".") : ""}`,
      { type: "button", onclick: () => { if (!a.check || a.check()) close(a.value); }, dataset: { action: String(a.value) } },
      a.label));
    const heading = title ? h("h2", { id: `dialog-title-${++dialogs}` }, title) : null;
    const node = h("dialog", { "aria-labelledby": heading ? heading.id : null }, // named by its title
      h("div.dialog-body", null, heading, body),
      h("div.dialog-actions", null, buttons));
    let done = false;
    function close(value) {
      if (done) return;
      done = true;
      node.close();
      node.remove();
      resolve(value);
    }
    node.addEventListener("cancel", (event) => { event.preventDefault(); close(null); }); // Escape
    // Enter in a one-line field presses the last action (the confirmation, through its check), as a form's submit
    // would; on a button, Enter presses that button, and a textarea keeps it as a new line.
    node.addEventListener("keydown", (event) => {
      if (event.key !== "Enter" || event.isComposing || !(event.target instanceof HTMLInputElement)) return;
      event.preventDefault();
      buttons[buttons.length - 1].click();
    });
    document.body.append(node);
    node.showModal();
    const first = node.querySelector("input:not([readonly]), textarea") || buttons[actions.findIndex((a) => a.focus)]
      || buttons[buttons.length - 1];
    if (first) first.focus();
  });
}

/** Asks before something irreversible. With `typeToConfirm`, the user must type that text first. */
export async function confirmDanger({ title, message, confirmLabel = "Delete", typeToConfirm }) {
  const input = typeToConfirm ? h("input", { type: "text", autocomplete: "off", placeholder: typeToConfirm, "aria-label": "Confirmation" }) : null;
  const body = h("div", null, h("p", { style: "margin:0" }, message),
    typeToConfirm ? h("label.field", null, `Type ${typeToConfirm} to confirm`, input) : null);
  const value = await dialog({
    title, body,
    // Focused on Cancel: an Enter pressed again (or held) on the button that opened it does not confirm.
    actions: [{ label: "Cancel", value: false, focus: true },
              { label: confirmLabel, value: true, class: "danger solid", check: () => !input || input.value === typeToConfirm }],
  });
  return value === true;
}

// --- unsaved work ---------------------------------------------------------------------------
let unsaved = null;

/**
 * A view with work not yet saved registers `describe`, which returns what would be lost (e.g. "Your changes to
 * _headers") or null; the shell asks before another view replaces it, and the browser before the page is left.
 * Each view starts with none registered.
 */
export function guardUnsaved(describe) {
  unsaved = describe;
}

export function unsavedWork() {
  return unsaved ? unsaved() : null;
}

export async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    const area = h("textarea", { value: text, style: "position:fixed;opacity:0" });
    document.body.append(area);
    area.select();
    document.execCommand("copy");
    area.remove();
  }
  toast("Copied to the clipboard");
}

/** A card with a heading row: card("Zones", [buttons...], ...content). */
export function card(title, tools, ...content) {
  return h("div.card", null, h("div.card-head", null, h("h2", null, title), h("div.row", null, tools || [])), content);
}

export function empty(text) {
  return h("div.empty", null, text);
}

export function badge(text, kind) {
  return h(`span.badge${kind ? "." + kind : ""}`, null, text);
}

export function icon(paths) {
  return s("svg", { viewBox: "0 0 24 24", "aria-hidden": "true" }, paths.map((d) => s("path", { d })));
}
