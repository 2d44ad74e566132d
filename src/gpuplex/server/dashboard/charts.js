// Usage over the last 24 hours, per tenant, as small SVG charts: GPU-hours allocated (bars) and
// busy (line) per hour, and requests and tokens per hour.

import { h, s, compact, number, swatch, tenantColour } from "./dom.js";

export const HOURS = 24;
const WIDTH = 360;
const HEIGHT = 110;
const PAD = { left: 34, right: 6, top: 8, bottom: 18 };

/** The range the usage panel asks for: 24 whole hours ending with the current one. */
export function usageRange(now = new Date()) {
  const end = new Date(now);
  end.setUTCMinutes(0, 0, 0);
  end.setUTCHours(end.getUTCHours() + 1);
  const start = new Date(end.getTime() - HOURS * 3600 * 1000);
  return { start, end };
}

/** Per hour: GPU-hours allocated and busy, requests, tokens. */
export function hourlySeries(reply, range) {
  const empty = () => new Array(HOURS).fill(0);
  const series = { allocated: empty(), busy: empty(), requests: empty(), tokens: empty(), measured: empty() };
  for (const p of reply.points) {
    const slot = Math.floor((new Date(p.start) - range.start) / 3600000);
    if (slot < 0 || slot >= HOURS) continue;
    const quantity = Number(p.quantity);
    if (p.source === "allocation" && p.metric === "gpu_seconds") series.allocated[slot] += quantity / 3600;
    else if (p.metric === "busy_gpu_seconds") {
      series.busy[slot] += quantity / 3600;
      series.measured[slot] = 1;
    } else if (p.metric === "requests") series.requests[slot] += quantity;
    else if (p.metric === "prompt_tokens" || p.metric === "completion_tokens") series.tokens[slot] += quantity;
    else if (p.source === "measured") series.measured[slot] = 1; // memory samples: measured, busy or idle
  }
  return series;
}

export function renderUsage(usages, range) {
  if (usages.length === 0) return h("p", { class: "empty" }, "No tenants to show.");
  return h("div", { class: "usage-grid", "data-testid": "usage" }, usages.map(({ tenant, series }) => usageCard(tenant, series, range)));
}

function sum(values) {
  return values.reduce((a, b) => a + b, 0);
}

function usageCard(tenant, series, range) {
  const allocated = sum(series.allocated);
  const busy = sum(series.busy);
  return h(
    "article",
    { class: "usage-card", "data-testid": "usage-card", "data-tenant": tenant },
    h("header", { class: "usage-head" }, h("span", { class: "tenant-cell" }, swatch(tenant), h("strong", {}, tenant))),
    h(
      "dl",
      { class: "stats" },
      stat("GPU-h allocated", number(allocated, 1)),
      stat("GPU-h busy", sum(series.measured) ? number(busy, 1) : "–"),
      stat("requests", compact(sum(series.requests))),
      stat("tokens", compact(sum(series.tokens))),
    ),
    gpuChart(tenant, series, range),
    trafficChart(series, range),
  );
}

function stat(label, value) {
  return h("div", { class: "stat" }, h("dt", {}, label), h("dd", {}, value));
}

function gpuChart(tenant, series, range) {
  const colour = tenantColour(tenant);
  const top = niceMax(Math.max(...series.allocated, ...series.busy));
  const chart = frame(`${tenant}: GPU-hours per hour, allocated and busy`, top, range, (v) => number(v, top < 2 ? 1 : 0));
  const { x, y, band } = scales(top);
  series.allocated.forEach((value, i) => {
    if (value <= 0) return;
    chart.append(s("rect", { x: x(i) + 1, y: y(value), width: band - 2, height: y(0) - y(value), fill: colour, opacity: "0.35", rx: "1" },
      s("title", {}, `${hourLabel(range, i)}: ${number(value, 2)} GPU-h allocated`)));
  });
  // the busy line runs through the hours that have GPU samples only: a gap is no data, not zero
  for (const run of runs(series.measured)) {
    const points = run.map((i) => `${(x(i) + band / 2).toFixed(1)},${y(series.busy[i]).toFixed(1)}`).join(" ");
    if (run.length === 1) chart.append(s("circle", { cx: x(run[0]) + band / 2, cy: y(series.busy[run[0]]), r: "2", fill: colour }));
    else chart.append(s("polyline", { points, fill: "none", stroke: colour, "stroke-width": "2", "stroke-linejoin": "round" }));
  }
  return h("figure", { class: "chart" }, chart, h("figcaption", {}, legendKey(colour, "allocated", true), busyCaption(colour, series)));
}

/** What the busy line stands for: samples with busy time, samples without any, or none at all. */
function busyCaption(colour, series) {
  if (sum(series.measured) === 0) return h("span", { class: "muted", "data-testid": "busy-caption" }, "busy: no GPU samples yet");
  if (sum(series.busy) > 0) return legendKey(colour, "busy", false);
  return h("span", { "data-testid": "busy-caption" }, legendKey(colour, "busy", false), h("span", { class: "muted" }, " (none measured: idle, or MIG slices NVML cannot measure)"));
}

/** Runs of consecutive hours whose flag is set, as lists of indices. */
function runs(flags) {
  const found = [];
  let current = [];
  flags.forEach((flag, i) => {
    if (flag) current.push(i);
    else if (current.length) {
      found.push(current);
      current = [];
    }
  });
  if (current.length) found.push(current);
  return found;
}

function trafficChart(series, range) {
  const top = niceMax(Math.max(...series.requests));
  const chart = frame("requests per hour", top, range, compact, 70);
  const { x, y, band } = scales(top, 70);
  series.requests.forEach((value, i) => {
    if (value <= 0) return;
    chart.append(s("rect", { x: x(i) + 1, y: y(value), width: band - 2, height: y(0) - y(value), class: "bar-requests", rx: "1" },
      s("title", {}, `${hourLabel(range, i)}: ${number(value)} request${value === 1 ? "" : "s"}, ${number(series.tokens[i])} token${series.tokens[i] === 1 ? "" : "s"}`)));
  });
  return h("figure", { class: "chart" }, chart, h("figcaption", {}, h("span", { class: "key" }, h("span", { class: "key-box bar-requests-key" }), "requests / h")));
}

function legendKey(colour, label, box) {
  return h("span", { class: "key" }, h("span", { class: box ? "key-box" : "key-line", style: { background: colour, opacity: box ? "0.45" : "1" } }), label);
}

function scales(top, height = HEIGHT) {
  const plotWidth = WIDTH - PAD.left - PAD.right;
  const band = plotWidth / HOURS;
  const bottom = height - PAD.bottom;
  return {
    band,
    x: (i) => PAD.left + i * band,
    y: (v) => bottom - (top > 0 ? (v / top) * (bottom - PAD.top) : 0),
  };
}

function frame(label, top, range, format, height = HEIGHT) {
  const { x, y } = scales(top, height);
  const svg = s("svg", { viewBox: `0 0 ${WIDTH} ${height}`, role: "img", "aria-label": label, class: "svg-chart" });
  for (const fraction of [0, 0.5, 1]) {
    const value = top * fraction;
    svg.append(s("line", { x1: PAD.left, x2: WIDTH - PAD.right, y1: y(value), y2: y(value), class: fraction === 0 ? "axis" : "grid" }));
    svg.append(s("text", { x: PAD.left - 4, y: y(value) + 3, class: "tick", "text-anchor": "end" }, format(value)));
  }
  for (let i = 0; i <= HOURS; i += 6) {
    svg.append(s("text", { x: x(i), y: height - 4, class: "tick", "text-anchor": i === 0 ? "start" : i === HOURS ? "end" : "middle" }, hourLabel(range, i)));
  }
  return svg;
}

function hourLabel(range, i) {
  return new Date(range.start.getTime() + i * 3600000).toISOString().slice(11, 16);
}

/** A round axis maximum at or above `value` (1, 2, 5 x 10^n); 1 when there is nothing. */
function niceMax(value) {
  if (!(value > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 2.5, 5, 10]) if (step * power >= value) return step * power;
  return 10 * power;
}
