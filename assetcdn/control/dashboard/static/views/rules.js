// Edge rules: the `_headers` and `_redirects` files (Cloudflare Pages syntax) every edge applies.
// Control parses the whole file before writing it; a syntax error comes back as 400 with
// error.details = [{line, message}], shown next to the line in the editor.
import { get, post } from "../api.js";
import { card, clear, formatDate, guardUnsaved, h, toast } from "../ui.js";

export const title = "Edge rules";

const FILES = {
  _headers: { key: "Headers", example: "/*\n  X-Frame-Options: DENY\n\n/acme/v1/*\n  Cache-Control: public, max-age=86400\n" },
  _redirects: { key: "Redirects", example: "/old-logo.png /acme/v1/logos/logo.png 301\n/docs/* https://docs.example.com/:splat 302\n" },
};

export async function render(container, { params }) {
  let current = params.get("file") in FILES ? params.get("file") : "_headers";
  let rules = await get("/api/core/rules");
  const tabs = h("div.segmented", { role: "tablist" });
  const gutter = h("div.gutter", { "aria-hidden": "true" });
  const textarea = h("textarea#rules-text", { spellcheck: false, wrap: "off", "aria-label": "Rules" });
  const errors = h("ul.rule-errors#rule-errors");
  const info = h("p.muted.small");
  const save = h("button.primary#rules-save", { type: "button", onclick: submit }, "Save and publish");
  let errorLines = new Set();
  // What each file holds as last read or saved, and what is typed in it and not saved (kept across the tabs).
  const stored = Object.fromEntries(Object.keys(FILES).map((name) => [name, rules[FILES[name].key] ?? ""]));
  const drafts = {};
  const unsaved = () => Object.keys(FILES).filter((name) => (name === current ? textarea.value : drafts[name] ?? stored[name]) !== stored[name]);
  guardUnsaved(() => {
    const names = unsaved();
    return names.length ? `Your changes to ${names.join(" and ")}` : null;
  });

  function paintGutter() {
    const count = Math.max(textarea.value.split("\n").length, 1);
    clear(gutter, Array.from({ length: count }, (_, i) => h(errorLines.has(i + 1) ? "div.error" : "div", null, String(i + 1))));
    gutter.scrollTop = textarea.scrollTop;
  }

  // The tabs are made once and marked: one drawn anew would take the focus away from the keyboard's choice.
  tabs.append(...Object.keys(FILES).map((name) => h("button", {
    type: "button", role: "tab", dataset: { file: name }, onclick: () => { drafts[current] = textarea.value; current = name; open(); },
  }, name)));
  function showTabs() {
    for (const tab of tabs.children) {
      tab.classList.toggle("active", tab.dataset.file === current);
      tab.setAttribute("aria-selected", String(tab.dataset.file === current));
    }
  }

  function open() {
    const content = rules[FILES[current].key];
    textarea.value = drafts[current] ?? content ?? "";
    textarea.placeholder = `# ${current} is empty. For example:\n${FILES[current].example}`;
    errorLines = new Set();
    clear(errors);
    info.textContent = content === null ? `${current} has never been written; saving creates it.`
      : `Saving replaces ${current} in one commit; every edge applies it at once. An empty file removes all rules.`;
    showTabs();
    paintGutter();
  }

  function jumpTo(line) {
    const lines = textarea.value.split("\n");
    const start = lines.slice(0, line - 1).reduce((n, l) => n + l.length + 1, 0);
    textarea.focus();
    textarea.setSelectionRange(start, start + (lines[line - 1] || "").length);
    textarea.scrollTop = Math.max(0, (line - 4) * 20);
  }

  async function submit() {
    save.disabled = true;
    clear(errors);
    errorLines = new Set();
    try {
      const file = current;
      const content = textarea.value;
      const answer = await post("/api/core/rules", { File: file, Content: content });
      toast(answer.Message || `${file} saved`);
      rules = await get("/api/core/rules");
      // As stored (whitespace alone removes the file), and the other file as it is now unless it is being edited;
      // what was saved is shown as stored, unless typed in meanwhile.
      for (const name of Object.keys(FILES)) {
        if (name === file || (name !== current && !(name in drafts))) stored[name] = rules[FILES[name].key] ?? "";
      }
      if (drafts[file] === content) delete drafts[file];
      if (current === file && textarea.value === content) textarea.value = stored[file];
      info.textContent = `Saved ${formatDate(answer.DateModified)}: commit ${String(answer.Commit || "").slice(0, 10)}. ${answer.EdgeNote || ""}`;
    } catch (error) {
      const details = error.details.filter((d) => Number.isInteger(d.line));
      errorLines = new Set(details.map((d) => d.line));
      clear(errors, details.length ? details.map((d) => h("li", { dataset: { line: d.line }, onclick: () => jumpTo(d.line) },
        h("button.link", { type: "button" }, `Line ${d.line}`), `: ${d.message}`)) : h("li", null, error.message));
      if (details.length) jumpTo(details[0].line);
    } finally {
      save.disabled = false;
      paintGutter();
    }
  }

  textarea.addEventListener("input", () => { if (errorLines.size) { errorLines = new Set(); clear(errors); } paintGutter(); });
  textarea.addEventListener("scroll", () => { gutter.scrollTop = textarea.scrollTop; });
  container.append(card("Rules for every zone", [tabs, save], info, h("div.editor", null, gutter, textarea), errors,
    h("p.muted.small", null, "_headers: a path pattern line, then indented 'Name: value' lines. ",
      "_redirects: '<from> <to> [status]' per line. Rules can add headers but never remove the sandbox or nosniff of stored files.")));
  open();
}
