// Analytics: requests, bandwidth, cache hit ratio, top assets, countries and errors over 1, 7 or
// 30 days, from GET /api/core/statistics and GET /api/insights/errors (the edges' delivery counters).
import { get } from "../api.js";
import { barChart, hbars, ratioChart } from "../charts.js";
import { card, clear, formatBytes, formatNumber, h } from "../ui.js";

export const title = "Analytics";

const PERIODS = [1, 7, 30];

function dayLabel(date) {
  const d = new Date(`${date}T00:00:00Z`);
  return d.toLocaleDateString("en-GB", { day: "numeric", month: "short", timeZone: "UTC" });
}

export async function render(container, { params }) {
  let days = PERIODS.includes(Number(params.get("days"))) ? Number(params.get("days")) : 7;
  let zone = params.get("zone") || "all";
  const zones = await get("/api/core/zones").catch(() => []);
  // A zone not listed (deleted since the link was kept, or mistyped) has no numbers: every zone's are shown, as the
  // picker says.
  if (!zones.some((z) => z.Name === zone)) zone = "all";
  const periods = h("div.segmented#period");
  const zonePicker = h("select#analytics-zone", { "aria-label": "Zone", onchange: () => { zone = zonePicker.value; sync(); } },
    h("option", { value: "all" }, "All zones"), zones.map((z) => h("option", { value: z.Name, selected: z.Name === zone }, z.Name)));
  const body = h("div#analytics-body", { style: "display: flex; flex-direction: column; gap: 18px" });
  container.append(h("div.row", null, periods, zonePicker, h("span.muted.small", null, "Days are UTC; today is still counting.")), body);

  function sync() {
    history.replaceState(null, "", `#/analytics?days=${days}&zone=${encodeURIComponent(zone)}`);
    showPeriods();
    load();
  }

  // The buttons are made once and marked: one drawn anew would take the focus away from the keyboard's choice.
  periods.append(...PERIODS.map((n) => h("button", { type: "button", dataset: { days: n }, onclick: () => { days = n; sync(); } },
    n === 1 ? "1 day" : `${n} days`)));
  function showPeriods() {
    for (const button of periods.children) {
      const active = Number(button.dataset.days) === days;
      button.classList.toggle("active", active);
      button.setAttribute("aria-pressed", String(active));
    }
  }

  async function load() {
    const query = { days, zone };
    let stats;
    let errors;
    try {
      [stats, errors] = await Promise.all([get("/api/core/statistics", query), get("/api/insights/errors", query)]);
    } catch (error) {
      clear(body, h("div.notice.error", null, error.message));
      return;
    }
    const daily = [...stats.Daily].reverse(); // oldest first, left to right
    const summary = stats.Summary;
    const errorCount = errors.Errors.reduce((n, e) => n + e.Count, 0);
    const kpi = (label, value, id) => h("div.kpi", { dataset: { kpi: id } }, h("div.label", null, label), h("div.value", null, value));
    clear(body,
      h("div.kpis", null,
        kpi("Requests", formatNumber(summary.TotalRequests), "requests"),
        kpi("Bandwidth", formatBytes(summary.TotalBandwidth), "bandwidth"),
        kpi("Cache hit ratio", summary.CacheHitRate, "hit-ratio"),
        kpi("Countries", formatNumber(summary.UniqueCountries), "countries"),
        kpi("Errors (4xx/5xx)", formatNumber(errorCount), "errors")),
      h("div.grid-2", null,
        card("Requests per day", null, barChart(daily.map((d) => ({ label: dayLabel(d.Date), value: d.TotalRequests })),
          { format: formatNumber, integer: true, name: "requests" })),
        card("Bandwidth per day", null, barChart(daily.map((d) => ({ label: dayLabel(d.Date), value: d.Bandwidth })),
          { format: formatBytes, alt: true, bytes: true, name: "bandwidth" }))),
      h("div.grid-2", null,
        card("Cache hit ratio", null, ratioChart(daily.map((d) => ({
          label: dayLabel(d.Date), value: d.CacheHit + d.CacheMiss ? d.CacheHit / (d.CacheHit + d.CacheMiss) : null,
        })), { name: "hit-ratio" })),
        card("Top assets", null, hbars(stats.TopAssets.map((a) => ({ label: a.Path, value: a.Requests })),
          { format: formatNumber, emptyText: "No asset delivered in this period.", name: "top-assets" }))),
      h("div.grid-2", null,
        card("Countries", null, hbars(stats.GeoDistribution.map((g) => ({ label: g.CountryCode === "XX" ? "XX (unknown)" : g.CountryCode, value: g.Requests })),
          { kind: "alt", format: formatNumber, emptyText: "No request in this period.", name: "countries" })),
        card("Errors by status", null,
          hbars(errors.Errors.map((e) => ({ label: `${e.StatusCode}`, value: e.Count })), { kind: "bad", format: formatNumber, emptyText: "No error in this period.", name: "errors" }),
          errors.Errors.length ? h("div.table-wrap", { style: "margin-top: 12px" }, h("table", null,
            h("thead", null, h("tr", null, h("th", null, "Status"), h("th", null, "Most frequent paths"), h("th.num", null, "Count"))),
            h("tbody", null, errors.Errors.flatMap((e) => e.TopPaths.slice(0, 3).map((p, i) => h("tr", null,
              h("td", null, i ? "" : h("span", { class: `status-${String(e.StatusCode)[0]}` }, String(e.StatusCode))),
              h("td.mono", null, p.Path), h("td.num", null, formatNumber(p.Count)))))))) : null)));
  }

  if (params.get("zone") && zone !== params.get("zone")) history.replaceState(null, "", `#/analytics?days=${days}&zone=all`);
  showPeriods();
  await load();
}
