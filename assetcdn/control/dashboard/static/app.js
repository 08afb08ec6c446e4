// The dashboard's shell: navigation (hash routes, #/<view>/<rest>?<query>), the view being shown,
// and the health indicator in the top bar. Each view module exports `title` and
// `render(container, {rest, params})`, which may return a function that stops what it started
// (timers, the live tail's event stream, a video player) when another view is opened.
import { status } from "./api.js";
import { clear, confirmDanger, guardUnsaved, h, icon, toast, unsavedWork } from "./ui.js";
import * as zones from "./views/zones.js";
import * as rules from "./views/rules.js";
import * as files from "./views/files.js";
import * as purge from "./views/purge.js";
import * as analytics from "./views/analytics.js";
import * as logs from "./views/logs.js";
import * as tokens from "./views/tokens.js";
import * as passkeys from "./views/passkeys.js";
import * as webhooks from "./views/webhooks.js";
import * as health from "./views/health.js";

const ICONS = {
  zones: ["M3 7l9-4 9 4-9 4-9-4z", "M3 12l9 4 9-4", "M3 17l9 4 9-4"],
  files: ["M3 7a2 2 0 0 1 2-2h4l2 2h8a2 2 0 0 1 2 2v8a2 2 0 0 1-2 2H5a2 2 0 0 1-2-2z"],
  rules: ["M4 6h16", "M4 12h10", "M4 18h13", "M17 15l3 3-3 3"],
  purge: ["M4 7h16", "M10 11v6", "M14 11v6", "M6 7l1 13h10l1-13", "M9 7V4h6v3"],
  analytics: ["M4 20V10", "M10 20V4", "M16 20v-7", "M22 20H2"],
  logs: ["M4 5h16", "M4 10h16", "M4 15h10", "M4 20h7", "M18 15v6", "M15 18h6"],
  tokens: ["M15 7a4 4 0 1 1-3.9 5H8v3H5v-3H3", "M15 7h.01"],
  passkeys: ["M12 3a4 4 0 0 1 4 4v3H8V7a4 4 0 0 1 4-4z", "M6 10h12v10H6z", "M12 14v3"],
  webhooks: ["M9 7a3 3 0 1 1 4.5 2.6L16 14", "M6 20a3 3 0 0 1-.6-5.9L8 10", "M18 20a3 3 0 1 0-2.4-4.8H9"],
  health: ["M3 12h4l3-7 4 14 3-7h4"],
};

const VIEWS = { zones, files, rules, purge, analytics, logs, tokens, passkeys, webhooks, health };
const NAV = [["zones", "Zones"], ["files", "Files"], ["rules", "Edge rules"], ["purge", "Purge"],
             ["analytics", "Analytics"], ["logs", "Live logs"], ["tokens", "API tokens"],
             ["passkeys", "Passkeys"], ["webhooks", "Webhooks"], ["health", "Health"]];

let stopCurrent = null;

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, "");
  const [pathPart, queryPart = ""] = raw.split("?");
  const [view, ...rest] = pathPart.split("/");
  return { view: VIEWS[view] ? view : "zones", rest: rest.map((p) => decodeURIComponent(p)), params: new URLSearchParams(queryPart) };
}

function buildNav() {
  const nav = document.getElementById("nav");
  clear(nav, NAV.map(([key, label]) => h("a", { href: `#/${key}`, dataset: { view: key } }, icon(ICONS[key]), label)));
  // On a narrow screen the sections are behind the Menu button (dashboard.css); it is hidden on a wide one.
  nav.addEventListener("click", () => showMenu(false)); // the view chosen may be the one shown: no route change
  document.getElementById("nav-toggle").addEventListener("click", () => showMenu(!document.querySelector(".sidebar").classList.contains("open")));
  document.querySelector(".sidebar").addEventListener("keydown", (event) => {
    if (event.key === "Escape") showMenu(false);
  });
}

function showMenu(open) {
  const sidebar = document.querySelector(".sidebar");
  const toggle = document.getElementById("nav-toggle");
  const closing = !open && sidebar.classList.contains("open");
  sidebar.classList.toggle("open", open);
  toggle.setAttribute("aria-expanded", String(open));
  // The sections hidden again (the Menu button is shown: a narrow screen) with the focus on one of them: the focus goes
  // back to the Menu button, not to the page's start.
  if (closing && toggle.getClientRects().length && sidebar.contains(document.activeElement)) toggle.focus();
}

async function show() {
  const route = parseHash();
  guardUnsaved(null);
  showMenu(false);
  if (typeof stopCurrent === "function") {
    try { stopCurrent(); } catch { /* a view's cleanup never blocks the next view */ }
  }
  stopCurrent = null;
  for (const link of document.querySelectorAll("#nav a")) link.classList.toggle("active", link.dataset.view === route.view);
  const module = VIEWS[route.view];
  document.getElementById("view-title").textContent = module.title;
  document.title = `${module.title} · assetcdn`;
  const container = clear(document.getElementById("view"));
  container.dataset.view = route.view;
  try {
    stopCurrent = await module.render(container, route);
  } catch (error) {
    clear(container, h("div.notice.error", null, `This view could not be shown: ${error.message}`));
  }
}

async function refreshHealth() {
  const pill = document.getElementById("health-pill");
  try {
    const report = await status(true);
    const { total, alive, maxLag } = report.edges;
    const ok = report.status === "ok";
    pill.className = `pill ${ok ? (maxLag ? "warn" : "ok") : "bad"}`;
    pill.textContent = `${ok ? "Healthy" : "Degraded"} · ${alive}/${total} edge${total === 1 ? "" : "s"}` + (maxLag ? ` · lag ${maxLag}` : "");
  } catch (error) {
    pill.className = "pill bad";
    pill.textContent = "Control unreachable";
  }
}

/**
 * Another route: the view shown is replaced, once the user agreed to lose what it has not saved. Staying puts the
 * address back as it was (replaceState, which fires no hashchange).
 */
async function navigate(event) {
  const pending = unsavedWork();
  if (pending) {
    const target = location.hash;
    const discard = await confirmDanger({ title: "Discard unsaved changes?", message: `${pending} will be lost.`,
                                          confirmLabel: "Discard changes" });
    if (location.hash !== target) return; // the route changed again meanwhile: that change decides
    if (!discard) {
      history.replaceState(null, "", event.oldURL);
      return;
    }
  }
  show();
}

// Chromium brings an element reached with Tab into sight only when none of it shows: a button half hidden at the edge of
// a table that scrolls sideways (a row's last action, on a phone) is scrolled wholly into the table's sight.
document.addEventListener("focusin", (event) => {
  const wrap = event.target instanceof Element ? event.target.closest(".table-wrap") : null;
  if (!wrap || wrap === event.target) return;
  const shown = wrap.getBoundingClientRect();
  const box = event.target.getBoundingClientRect();
  if (box.left < shown.left || box.right > shown.right) event.target.scrollIntoView({ block: "nearest", inline: "nearest" });
});

buildNav();
window.addEventListener("hashchange", navigate);
window.addEventListener("beforeunload", (event) => {
  if (unsavedWork()) {
    event.preventDefault();
    event.returnValue = true; // browsers that ask only when it is set
  }
});
window.addEventListener("unhandledrejection", (event) => {
  const reason = event.reason;
  if (reason && reason.status !== 401) toast(reason.message || String(reason), "error");
});
show();
refreshHealth();
setInterval(refreshHealth, 15000);
