// Health: control's checks and every edge node's state (generation, lag behind control, last
// heartbeat, last push acknowledgement), refreshed every 5 seconds.
import { status } from "../api.js";
import { ago, badge, card, clear, duration, formatNumber, h } from "../ui.js";

export const title = "Health";

function line(label, value) {
  return h("div.stat-line", null, h("span", null, label), h("span", null, value));
}

function edgeCard(node) {
  const state = node.alive ? (node.lag ? `lag ${node.lag}` : "in sync") : "unreachable";
  // Each worker's generation and last heartbeat are written out: a title on hover cannot be read on a touch screen.
  const workers = h("ul.workers", null, node.workers.map((w) => h("li", { dataset: { worker: w.name } },
    h("span", null, h(`span.dot.${w.alive ? "ok" : "bad"}`), w.name),
    h("span.muted", null, `generation ${formatNumber(w.generation)} · seen ${w.lastSeenSecondsAgo} s ago`))));
  const alive = node.workers.filter((w) => w.alive).length;
  return h("div.node", { dataset: { edge: node.name } },
    h("div.name", null, node.name, badge(state, node.alive ? (node.lag ? "warn" : "ok") : "bad")),
    line("Generation", formatNumber(node.generation)),
    line("Lag behind control", `${node.lag} generation${node.lag === 1 ? "" : "s"}`),
    line("Last push ack", node.lastAckAt ? `${ago(node.lastAckAt)} · ${node.lastPushMs} ms` : "none yet"),
    line("Last heartbeat", `${Math.min(...node.workers.map((w) => w.lastSeenSecondsAgo))} s ago`),
    line("Workers", `${alive} of ${node.workers.length} alive`),
    workers);
}

export async function render(container) {
  const body = h("div#health-body", { style: "display: flex; flex-direction: column; gap: 18px" });
  const stamp = h("span.muted.small");
  container.append(h("div.row", null, stamp), body);

  async function load() {
    let report;
    try {
      report = await status(true);
    } catch (error) {
      clear(body, h("div.notice.error", null, `Control did not answer: ${error.message}`));
      return;
    }
    const control = report.control;
    const edges = report.edges;
    stamp.textContent = `Updated ${new Date(report.DateFetched).toLocaleTimeString("en-GB")} · refreshes every 5 s`;
    clear(body,
      h("div.kpis", null,
        h("div.kpi", { dataset: { kpi: "status" } }, h("div.label", null, "Overall"), h("div.value", null, report.status === "ok" ? "Healthy" : "Degraded")),
        h("div.kpi", { dataset: { kpi: "generation" } }, h("div.label", null, "Manifest generation"), h("div.value", null, formatNumber(control.generation))),
        h("div.kpi", { dataset: { kpi: "edges" } }, h("div.label", null, "Edges alive"), h("div.value", null, `${edges.alive} / ${edges.total}`)),
        h("div.kpi", { dataset: { kpi: "lag" } }, h("div.label", null, "Largest lag"), h("div.value", null, `${edges.maxLag} gen.`)),
        h("div.kpi", { dataset: { kpi: "files" } }, h("div.label", null, "Files served"), h("div.value", null, formatNumber(control.files)))),
      card("Control plane", [badge(control.status, control.status === "ok" ? "ok" : "bad")],
        h("div.grid-2", null,
          h("div", null,
            line("Generation", formatNumber(control.generation)),
            line("Commit", h("code", null, (control.commit || "none").slice(0, 12))),
            line("Up for", duration(control.uptimeSeconds)),
            line("API version", control.apiVersion)),
          h("div", null, control.checks.map((c) => line(c.name,
            h("span", null, h(`span.dot.${c.healthy ? "ok" : "bad"}`), c.healthy ? `ok · ${c.latencyMs} ms` : (c.error || "failing"))))))),
      card("Edges", null, edges.nodes.length
        ? h("div.health-grid#edge-nodes", null, edges.nodes.map(edgeCard))
        : h("div.empty", null, "No edge has registered with control.")));
  }

  await load();
  const timer = setInterval(load, 5000);
  return () => clearInterval(timer);
}
