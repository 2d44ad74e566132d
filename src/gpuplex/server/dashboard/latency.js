// Latency a tenant sees, per model: the wait in the fair queue, time to first token (queue wait
// included) and inter-token latency of streamed replies, 50th and 95th percentile over the last
// hour's requests (GET /tenants/{tenant}/latency, from the gateway's usage records).

import { h, number, swatch } from "./dom.js";

/** "850 ms", "1.25 s", "–" when there is nothing to show. */
export function duration(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  if (seconds < 0.001) return "<1 ms";
  if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
  return `${seconds.toFixed(seconds < 10 ? 2 : 1)} s`;
}

function percentiles(p, what) {
  if (!p) return h("td", { class: "num muted", "data-metric": what }, "–");
  return h(
    "td",
    { class: "num", "data-metric": what, "data-p50-s": String(p.p50_s), "data-p95-s": String(p.p95_s), title: `over ${p.count} request${p.count === 1 ? "" : "s"}` },
    duration(p.p50_s),
    h("span", { class: "muted" }, ` · ${duration(p.p95_s)}`),
  );
}

/** `list`: [{tenant, value: the latency reply}], one per tenant the user may see. */
export function renderLatency(list) {
  const rows = list.flatMap(({ tenant, value }) => value.models.map((m) => ({ tenant, ...m })));
  if (rows.length === 0) return h("p", { class: "empty" }, "No requests through the gateway in the last hour.");
  return h(
    "table",
    { class: "table", "data-testid": "latency-table" },
    h(
      "thead",
      {},
      h("tr", {}, ["Tenant", "Model", "Requests", "Queue wait p50 · p95", "Time to first token p50 · p95", "Inter-token latency p50 · p95"].map((t) => h("th", { scope: "col" }, t))),
    ),
    h(
      "tbody",
      {},
      rows.map((r) =>
        h(
          "tr",
          { "data-testid": "latency-row", "data-tenant": r.tenant, "data-model": r.model },
          h("td", {}, h("span", { class: "tenant-cell" }, swatch(r.tenant), h("strong", {}, r.tenant))),
          h("td", { class: "mono" }, r.model),
          h("td", { class: "num" }, number(r.requests)),
          percentiles(r.queue_wait, "queue-wait"),
          percentiles(r.time_to_first_token, "ttft"),
          percentiles(r.inter_token_latency, "itl"),
        ),
      ),
    ),
  );
}
