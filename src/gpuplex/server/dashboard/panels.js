// The tenants table, spend against budget, and recent events.

import { budgetNote } from "./budgets.js";
import { h, gib, money, number, swatch, tenantColour, utcTime } from "./dom.js";

// ---- tenants: quota against allocation ------------------------------------------------------

export function renderTenants(tenants) {
  if (tenants.length === 0) return h("p", { class: "empty" }, "No tenants yet: apply a spec.");
  return h(
    "table",
    { class: "table", "data-testid": "tenants-table" },
    h(
      "thead",
      {},
      h("tr", {}, ["Tenant", "Priority", "Replicas", "GPUs (compute)", "GPU memory", "MIG slices", "Jobs"].map((t) => h("th", { scope: "col" }, t))),
    ),
    h("tbody", {}, tenants.map(tenantRow)),
  );
}

function tenantRow(t) {
  const quota = t.quota || {};
  const alloc = t.allocated;
  const gpuLimit = quota.gpus ?? (quota.compute_percent !== undefined ? quota.compute_percent / 100 : null);
  const memoryLimit = quota.gpu_memory_gib !== undefined ? quota.gpu_memory_gib * 1024 : null;
  return h(
    "tr",
    { "data-testid": "tenant-row", "data-tenant": t.name },
    h(
      "td",
      {},
      h("div", { class: "tenant-cell" }, swatch(t.name), h("strong", {}, t.name), h("span", { class: `badge tier-${t.tier}` }, t.tier), t.regulated ? h("span", { class: "badge regulated" }, "regulated") : null),
    ),
    h("td", { class: "num" }, number(t.priority)),
    h(
      "td",
      { class: "num" },
      `${t.allocated.replicas_placed} placed`,
      alloc.replicas_pending ? h("span", { class: "warn" }, ` · ${alloc.replicas_pending} pending`) : null,
      ridesOn(t),
    ),
    h("td", {}, meter(alloc.gpus, gpuLimit, (v) => number(v, 2), t.name)),
    h("td", {}, meter(alloc.memory_mib, memoryLimit, (v) => gib(v), t.name)),
    h("td", {}, migCell(alloc.mig || {}, quota.mig || {})),
    h("td", { "data-testid": "tenant-jobs" }, jobsCell(t.jobs)),
  );
}

// The tenant's jobs: how many run and wait, and what the running ones hold (held to the queues,
// not to the quota on the left).
function jobsCell(jobs) {
  if (!jobs || (jobs.holding === 0 && jobs.queued === 0)) return h("span", { class: "muted" }, "–");
  const held = [`${number(jobs.gpus, 2)} GPU${jobs.gpus === 1 ? "" : "s"}`, gib(jobs.memory_mib)];
  for (const [profile, count] of Object.entries(jobs.mig || {}).sort()) held.push(`${count} x ${profile}`);
  return h(
    "div",
    {},
    h("span", { "data-testid": "tenant-jobs-count" }, `${jobs.holding} running`, jobs.queued ? h("span", { class: "warn" }, ` · ${jobs.queued} queued`) : null),
    jobs.holding ? h("div", { class: "muted small", "data-testid": "tenant-jobs-held" }, `holding ${held.join(" · ")}`) : null,
  );
}

// A tenant whose LoRA adapters run in another tenant's model server: where they ride.
function ridesOn(t) {
  if (!t.rides_on || t.rides_on.length === 0) return null;
  return h("div", { class: "muted small", "data-testid": "tenant-rides-on" }, `rides on ${t.rides_on.join(", ")}`);
}

function meter(value, limit, format, tenant) {
  const text = limit === null ? `${format(value)} · no quota` : `${format(value)} of ${format(limit)}`;
  const ratio = limit ? Math.min(value / limit, 1) : 0;
  const over = limit !== null && value > limit + 1e-9;
  return h(
    "div",
    { class: "meter" },
    h("span", { class: "meter-text" }, text),
    limit === null
      ? null
      : h("span", { class: "meter-bar", role: "meter", "aria-valuemin": "0", "aria-valuemax": String(limit), "aria-valuenow": String(value) },
          h("span", { class: over ? "meter-fill over" : "meter-fill", style: { width: `${(ratio * 100).toFixed(1)}%`, background: over ? null : tenantColour(tenant) } })),
  );
}

function migCell(allocated, quota) {
  const profiles = [...new Set([...Object.keys(allocated), ...Object.keys(quota)])].sort();
  if (profiles.length === 0) return h("span", { class: "muted" }, "–");
  return h(
    "div",
    { class: "chips" },
    profiles.map((p) => h("span", { class: "chip" }, `${p} ${allocated[p] || 0}${quota[p] !== undefined ? ` / ${quota[p]}` : ""}`)),
  );
}

// ---- spend against budget -------------------------------------------------------------------

export function renderBudgets(budgets) {
  if (budgets.length === 0) return h("p", { class: "empty" }, "No budgets to show.");
  return h("div", { class: "budgets", "data-testid": "budgets" }, budgets.map(budgetRow));
}

function budgetRow(b) {
  const spend = Number(b.spend);
  const projected = Number(b.projected_spend);
  const amount = b.amount === null ? null : Number(b.amount);
  const fired = new Set((b.alerts || []).map((a) => a.threshold_percent));
  const head = h(
    "div",
    { class: "budget-head" },
    h("span", { class: "tenant-cell" }, swatch(b.tenant), h("strong", {}, b.tenant)),
    h(
      "span",
      { class: "budget-figures" },
      h("strong", {}, money(spend, b.currency)),
      amount === null ? h("span", { class: "muted" }, " spent this month · no budget") : h("span", { class: "muted" }, ` of ${money(amount, b.currency)}`),
      h("span", { class: "muted" }, ` · projected ${money(projected, b.currency)}`),
    ),
  );
  if (amount === null) {
    return h("div", { class: "budget", "data-testid": "budget-row", "data-tenant": b.tenant }, head, budgetNote(b));
  }
  const scale = Math.max(amount, projected, spend, 1e-9) * 1.05;
  const percent = amount > 0 ? (spend / amount) * 100 : 0;
  const level = percent >= 100 ? "over" : percent >= 80 ? "high" : percent >= 50 ? "mid" : "ok";
  const bar = h(
    "div",
    { class: "budget-bar", role: "meter", "aria-label": `${b.tenant}: ${percent.toFixed(0)}% of budget`, "aria-valuenow": String(spend), "aria-valuemax": String(amount) },
    h("span", { class: "budget-projected", style: { width: w(projected / scale) } }),
    h("span", { class: `budget-spend level-${level}`, style: { width: w(spend / scale) } }),
    b.thresholds_percent.map((t) =>
      h("span", { class: fired.has(t) ? "threshold fired" : "threshold", style: { left: w((amount * t) / 100 / scale) }, title: `${t}% of budget${fired.has(t) ? ": alert fired" : ""}` }, h("span", { class: "threshold-label" }, `${t}%`)),
    ),
  );
  return h(
    "div",
    { class: "budget", "data-testid": "budget-row", "data-tenant": b.tenant, "data-level": level, "data-enforced": b.enforced || "alert" },
    head,
    bar,
    budgetNote(b),
    fired.size ? h("div", { class: "alerts" }, [...fired].sort((x, y) => x - y).map((t) => h("span", { class: "badge alert" }, `${t}% alert fired`))) : null,
  );
}

function w(fraction) {
  return `${(Math.min(Math.max(fraction, 0), 1) * 100).toFixed(2)}%`;
}

// ---- recent events ----------------------------------------------------------------------------

const SEVERE = new Set(["preempted", "failed", "vram_exceeded", "health_failed", "blocked"]);
const NOTABLE = new Set(["stopped", "exited", "restarted", "started", "mps_daemon_stopped"]);

export function renderEvents(events) {
  if (events.length === 0) return h("p", { class: "empty" }, "No events yet.");
  const now = new Date();
  return h(
    "table",
    { class: "table events", "data-testid": "events-table" },
    h("thead", {}, h("tr", {}, ["Time (UTC)", "Source", "Event", "Target", "Message"].map((t) => h("th", { scope: "col" }, t)))),
    h(
      "tbody",
      {},
      events.map((e) => {
        const kind = e.kind.toLowerCase();
        const tone = SEVERE.has(kind) ? "severe" : NOTABLE.has(kind) ? "notable" : "info";
        return h(
          "tr",
          { "data-testid": "event-row", "data-tenant": e.tenant || "", "data-kind": e.kind },
          h("td", { class: "nowrap muted" }, h("time", { datetime: e.at }, utcTime(e.at, now))),
          h("td", {}, h("span", { class: `badge source-${e.source}` }, e.source)),
          h("td", {}, h("span", { class: `kind tone-${tone}` }, e.kind)),
          h("td", { class: "mono" }, e.target),
          h("td", { class: "message" }, e.message),
        );
      }),
    ),
  );
}
