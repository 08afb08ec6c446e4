// Charts drawn as inline SVG (no chart library): vertical bars, a line, horizontal bars.
import { h, s } from "./ui.js";

// The width a chart is drawn for, in the units of its labels (13): scaled to its card, 640 on a wide screen; on a narrow
// one (a phone's card, about 324 px) that would make the labels 6.6 px high, so it is drawn 400 wide (10.5 px).
const NARROW = window.matchMedia("(max-width: 760px)");
const chartWidth = () => (NARROW.matches ? 400 : 640);
// Whether a value's label (13 units, semi-bold: at most 9 units a character) fits above its bar without touching the
// next one's: else it is left out, as with more than 10 points (the readout under the chart gives it: readable()).
const fits = (text, slot) => text.length * 9 <= slot;
const PAD = { top: 14, right: 12, bottom: 26, left: 52 };

function niceMax(value) {
  if (value <= 0) return 1;
  const exponent = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 2.5, 5, 10]) {
    if (step * exponent >= value) return step * exponent;
  }
  return 10 * exponent;
}

/** The largest binary unit (1, KB, MB, ...) below a byte count. */
function byteUnit(value) {
  let unit = 1;
  while (value >= unit * 1024 && unit < 1024 ** 4) unit *= 1024;
  return unit;
}

/** Grid lines at round values: 4 of them for a maximum of 2, 4 or 8 (x 10^n), else 5. */
function divisionsFor(max, unit = 1) {
  const scaled = max / unit;
  const mantissa = scaled / 10 ** Math.floor(Math.log10(scaled));
  return [2, 4, 8].includes(Math.round(mantissa * 100) / 100) ? 4 : 5;
}

function frame(W, height, max, format, divisions = 4) {
  const inner = height - PAD.top - PAD.bottom;
  const grid = s("g", { class: "grid" });
  const axis = s("g", { class: "axis" });
  for (let i = 0; i <= divisions; i += 1) {
    const y = PAD.top + inner - (inner * i) / divisions;
    grid.append(s("line", { x1: PAD.left, x2: W - PAD.right, y1: y, y2: y }));
    axis.append(s("text", { x: PAD.left - 8, y: y + 4, "text-anchor": "end" }, format((max * i) / divisions)));
  }
  return { inner, grid, axis };
}

/** Which points' day is written under the axis: every one, or every n-th, far enough apart (13 units: at most 8 a character). */
function labelEvery(points, slot) {
  const widest = Math.max(0, ...points.map((p) => String(p.label).length)) * 8;
  return Math.max(points.length <= 10 ? 1 : Math.ceil(points.length / 8), Math.ceil(widest / slot));
}

/**
 * A day's number for a touch screen and the keyboard too, not only in a title on hover: a tap (or click) in a day's
 * column, or the arrow keys (Home, End) once the chart has the focus, marks that day and writes its number in a line
 * under the chart. days = [{left, width, mark, text}] in the chart's units, oldest first; mark is the day's bar or point.
 */
function readable(svg, days, name, top, height) {
  const readout = h("div.readout.muted.small", { "aria-live": "polite" },
    days.length ? "Tap a day, or focus the chart and use the arrow keys, to read its number." : "");
  if (!days.length) return readout;
  let chosen = -1;
  const choose = (i) => {
    if (chosen >= 0) days[chosen].mark.classList.remove("selected");
    chosen = Math.max(0, Math.min(days.length - 1, i));
    days[chosen].mark.classList.add("selected");
    readout.textContent = days[chosen].text;
    readout.classList.remove("muted");
  };
  // Each day's whole column answers a tap: a bar of 30 on a phone is 6 px wide, a point 8 px.
  days.forEach((day, i) => {
    svg.append(s("rect", { class: "hit", x: day.left, y: top, width: day.width, height }, s("title", null, day.text)));
    svg.lastElementChild.addEventListener("click", () => choose(i));
  });
  svg.setAttribute("tabindex", "0");
  svg.setAttribute("aria-label", `${name}: the arrow keys read each day`);
  svg.addEventListener("focus", () => { if (chosen < 0) choose(days.length - 1); });
  const keys = { ArrowLeft: () => chosen - 1, ArrowRight: () => chosen + 1, Home: () => 0, End: () => days.length - 1 };
  svg.addEventListener("keydown", (event) => {
    if (!(event.key in keys)) return;
    event.preventDefault();
    choose(keys[event.key]());
  });
  return readout;
}

/**
 * Vertical bars, one per point: points = [{label, value, title}], oldest first.
 * Options: format (axis and tooltip numbers), height, alt (second colour), integer (counts), bytes (round units).
 */
export function barChart(points, { format = String, height = 220, alt = false, name = "chart", integer = false, bytes = false } = {}) {
  const top = Math.max(0, ...points.map((p) => p.value));
  const unit = bytes ? byteUnit(top) : 1; // a round number of that unit: 2.5 MB, not 2.62 MB
  let max = niceMax(top / unit) * unit;
  if (integer) max = Math.max(max, 4); // whole numbers on every grid line
  const W = chartWidth();
  const { inner, grid, axis } = frame(W, height, max, format, divisionsFor(max, unit));
  const svg = s("svg", { viewBox: `0 0 ${W} ${height}`, role: "img", "aria-label": name });
  svg.append(grid, axis);
  const slot = (W - PAD.left - PAD.right) / Math.max(points.length, 1);
  const barWidth = Math.min(46, slot * 0.64);
  const every = labelEvery(points, slot);
  const days = [];
  points.forEach((point, i) => {
    const x = PAD.left + slot * i + (slot - barWidth) / 2;
    const barHeight = max ? (inner * point.value) / max : 0;
    const y = PAD.top + inner - barHeight;
    const text = point.title || `${point.label}: ${format(point.value)}`;
    const bar = s("rect", { class: alt ? "bar alt" : "bar", x, y, width: barWidth, height: Math.max(barHeight, point.value ? 1.5 : 0), rx: 3 },
      s("title", null, text));
    svg.append(bar);
    days.push({ left: PAD.left + slot * i, width: slot, mark: bar, text });
    if (points.length <= 10 && point.value && fits(format(point.value), slot)) {
      svg.append(s("text", { class: "value-label", x: x + barWidth / 2, y: y - 4, "text-anchor": "middle" }, format(point.value)));
    }
    if (i % every === 0) {
      axis.append(s("text", { x: x + barWidth / 2, y: height - 8, "text-anchor": "middle" }, point.label));
    }
  });
  if (!points.some((p) => p.value)) {
    svg.append(s("text", { class: "empty-note", x: W / 2, y: PAD.top + inner / 2, "text-anchor": "middle" }, "No traffic in this period"));
  }
  const readout = points.some((p) => p.value) ? readable(svg, days, name, PAD.top, inner) : null;
  return h("div.chart", { dataset: { chart: name } }, svg, readout);
}

/** A line over points = [{label, value (0..1 or null)}], with an area under it; y is a percentage. A value short of 1
 * reads at most 99%, one above 0 at least 1%: 99.95% rounded to 100% would hide the day's misses. */
export function ratioChart(points, { height = 220, name = "chart" } = {}) {
  const format = (v) => `${Math.min(Math.max(Math.round(v * 100), v > 0 ? 1 : 0), v < 1 ? 99 : 100)}%`;
  const W = chartWidth();
  const { inner, grid, axis } = frame(W, height, 1, format);
  const svg = s("svg", { viewBox: `0 0 ${W} ${height}`, role: "img", "aria-label": name });
  svg.append(grid, axis);
  const slot = (W - PAD.left - PAD.right) / Math.max(points.length, 1);
  const every = labelEvery(points, slot);
  const xy = [];
  points.forEach((point, i) => {
    const x = PAD.left + slot * i + slot / 2;
    if (i % every === 0) axis.append(s("text", { x, y: height - 8, "text-anchor": "middle" }, point.label));
    if (point.value !== null && point.value !== undefined) xy.push([x, PAD.top + inner - inner * point.value, point]);
  });
  if (xy.length) {
    const line = xy.map(([x, y], i) => `${i ? "L" : "M"}${x.toFixed(1)},${y.toFixed(1)}`).join(" ");
    const base = PAD.top + inner;
    svg.append(s("path", { class: "area", d: `${line} L${xy[xy.length - 1][0].toFixed(1)},${base} L${xy[0][0].toFixed(1)},${base} Z` }));
    svg.append(s("path", { class: "line", d: line }));
    const days = [];
    for (const [x, y, point] of xy) {
      const text = `${point.label}: ${format(point.value)}`;
      const mark = s("circle", { class: "pointmark", cx: x, cy: y, r: 4 }, s("title", null, text));
      svg.append(mark);
      days.push({ left: x - slot / 2, width: slot, mark, text });
      if (xy.length <= 10 && fits(format(point.value), slot)) svg.append(s("text", { class: "value-label", x, y: y - 9, "text-anchor": "middle" }, format(point.value)));
    }
    return h("div.chart", { dataset: { chart: name } }, svg, readable(svg, days, name, PAD.top, inner));
  }
  svg.append(s("text", { class: "empty-note", x: W / 2, y: PAD.top + inner / 2, "text-anchor": "middle" }, "No cacheable traffic in this period"));
  return h("div.chart", { dataset: { chart: name } }, svg);
}

/** Horizontal bars for ranked lists: rows = [{label, value}]; a long label (a path) wraps, whole (dashboard.css). */
export function hbars(rows, { kind = "", format = String, emptyText = "Nothing yet", name = "ranking" } = {}) {
  if (!rows.length) return h("div.empty", { dataset: { chart: name } }, emptyText);
  const max = Math.max(...rows.map((r) => r.value), 1);
  return h("div.hbars", { dataset: { chart: name } }, rows.map((row) => h("div.hbar", null,
    h("div.track", null,
      h(`div.fill${kind ? "." + kind : ""}`, { style: `width: ${Math.max((100 * row.value) / max, 1.5).toFixed(1)}%` }),
      h("div.text", null, row.label)),
    h("div.count", null, format(row.value)))));
}

export function legend(items) {
  return h("div.legend", null, items.map(([label, colour]) => {
    const item = h("span", null, label);
    item.style.setProperty("--swatch", colour);
    return item;
  }));
}
