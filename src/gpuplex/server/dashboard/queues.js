// The queues panel (GET /queues): per queue, organisation -> team -> tenant, what it guarantees,
// what is in use (the spec's replicas and the jobs holding capacity), what of that is borrowed
// above the guarantee, and its limit, kind by kind with a bar; then the queued jobs in their
// tenant's order with why each waits, and the jobs that hold capacity with where they run.

import { h, number, swatch, utcTime } from "./dom.js";

const KIND_NAMES = { gpus: "GPUs", gpu_memory_gib: "GPU memory", compute_percent: "Compute" };
const MIG = "mig:";
const LEVEL_NAMES = { cluster: "cluster", organisation: "organisation", team: "team", tenant: "tenant" };
const MODE_NAMES = { dedicated: "whole GPU", mig: "MIG", mps: "MPS share", timeslice: "time-sliced" };
const STATE_TONES = { starting: "notable", running: "info", preempting: "severe", stopping: "notable" };

function kindName(kind) {
  if (kind.startsWith(MIG)) return `MIG ${kind.slice(MIG.length)}`;
  return KIND_NAMES[kind] || kind;
}

/** An amount of a kind, with its unit: "40 GiB", "150 %", "2", "1 slice". */
function amount(kind, value) {
  const digits = Number.isInteger(value) ? 0 : value < 10 ? 2 : 1;
  if (kind === "gpu_memory_gib") return `${number(value, digits)} GiB`;
  if (kind === "compute_percent") return `${number(value, digits)} %`;
  if (kind.startsWith(MIG)) return `${number(value, digits)} slice${value === 1 ? "" : "s"}`;
  return number(value, digits);
}

export function renderQueues(reply) {
  if (reply.revision === null) return h("p", { class: "empty" }, "No spec applied yet.");
  if (!reply.configured) {
    return [
      h("p", { class: "empty", "data-testid": "queues-none" }, "The applied spec has no queues: section, so it takes no jobs."),
      reply.jobs.length ? jobTables(reply) : null,
    ];
  }
  return [queueTable(reply.queues), jobTables(reply)];
}

// ---- the queue tree ---------------------------------------------------------------------------

function queueTable(queues) {
  if (queues.length === 0) return h("p", { class: "empty" }, "Your tenant has no queue: it cannot run jobs.");
  return h(
    "table",
    { class: "table queues", "data-testid": "queues-table" },
    h("thead", {}, h("tr", {}, ["Queue", "Weight", "Jobs", "Kind", "Guarantee", "In use", "Limit", "Borrowed"].map((t) => h("th", { scope: "col" }, t)))),
    queues.map(queueRows),
  );
}

/** One queue: a row per kind (its name, weight and jobs span them all); a tbody of its own. */
function queueRows(q) {
  const kinds = q.resources.length ? q.resources : [null];
  const span = String(kinds.length);
  const head = [
    h("td", { rowspan: span, class: "queue-name" }, queueName(q)),
    h("td", { rowspan: span, class: "num" }, number(q.weight, Number.isInteger(q.weight) ? 0 : 2)),
    h("td", { rowspan: span, class: "num" }, jobCounts(q)),
  ];
  return h(
    "tbody",
    { "data-testid": "queue-row", "data-queue": q.name, "data-level": q.level },
    kinds.map((k, i) => h("tr", {}, i === 0 ? head : null, k === null ? h("td", { colspan: "5", class: "muted" }, "nothing guaranteed, limited or in use") : kindCells(k))),
  );
}

function queueName(q) {
  const name = q.level === "tenant" ? h("span", { class: "tenant-cell" }, swatch(q.name), h("strong", {}, q.name)) : h("strong", {}, q.name);
  const flags = [!q.lends ? "does not lend" : null, !q.borrows ? "does not borrow" : null].filter(Boolean);
  return h(
    "div",
    { class: "queue-cell", style: { paddingLeft: `${q.depth * 14}px` } },
    name,
    h("span", { class: `badge level-${q.level}` }, LEVEL_NAMES[q.level] || q.level),
    flags.length ? h("div", { class: "muted small" }, flags.join(" · ")) : null,
  );
}

function jobCounts(q) {
  if (q.queued_jobs === null) return h("span", { class: "muted" }, "–");
  return [`${number(q.holding_jobs)} running`, q.queued_jobs ? h("span", { class: "warn" }, ` · ${number(q.queued_jobs)} queued`) : null];
}

function kindCells(k) {
  return [
    h("td", { class: "nowrap", "data-testid": "queue-kind", "data-kind": k.kind }, kindName(k.kind)),
    h("td", { class: "num" }, amount(k.kind, k.guarantee)),
    h("td", {}, useMeter(k)),
    h("td", { class: "num" }, k.limit === null ? h("span", { class: "muted" }, "none") : amount(k.kind, k.limit)),
    h("td", { class: "num" }, k.borrowed > 0 ? h("span", { class: "warn", "data-testid": "queue-borrowed" }, amount(k.kind, k.borrowed)) : h("span", { class: "muted" }, "–")),
  ];
}

/** In use on a bar scaled to the limit (else to the larger of guarantee and use): the part within
 * the guarantee, the part borrowed above it, and a tick at the guarantee. */
function useMeter(k) {
  const scale = Math.max(k.limit ?? 0, k.guarantee, k.in_use, 1e-9);
  const within = Math.min(k.in_use, k.guarantee);
  const over = k.limit !== null && k.in_use > k.limit + 1e-9;
  const label = `${amount(k.kind, k.in_use)} in use of ${k.limit === null ? "no limit" : amount(k.kind, k.limit)}, ${amount(k.kind, k.guarantee)} guaranteed`;
  return h(
    "div",
    { class: "meter" },
    h("span", { class: "meter-text", "data-testid": "queue-in-use" }, amount(k.kind, k.in_use)),
    h(
      "span",
      { class: "queue-bar", role: "meter", "aria-label": label, "aria-valuemin": "0", "aria-valuemax": String(scale), "aria-valuenow": String(k.in_use) },
      h("span", { class: over ? "queue-within over" : "queue-within", style: { width: pct(within / scale) } }),
      k.borrowed > 0 ? h("span", { class: "queue-borrowed", style: { left: pct(within / scale), width: pct(k.borrowed / scale) } }) : null,
      k.guarantee > 0 ? h("span", { class: "queue-guarantee", style: { left: pct(k.guarantee / scale) }, title: `guarantee ${amount(k.kind, k.guarantee)}` }) : null,
    ),
  );
}

function pct(fraction) {
  return `${(Math.min(Math.max(fraction, 0), 1) * 100).toFixed(2)}%`;
}

// ---- jobs ---------------------------------------------------------------------------------------

function jobTables(reply) {
  const queued = reply.jobs.filter((j) => j.state === "queued");
  const holding = reply.jobs.filter((j) => j.state !== "queued");
  const now = new Date();
  return h(
    "div",
    { class: "queue-jobs" },
    h("h3", {}, "Waiting ", h("span", { class: "muted" }, "in each tenant's order, with why each waits")),
    queued.length === 0 ? h("p", { class: "empty", "data-testid": "no-queued-jobs" }, "No job is waiting.") : waitingTable(queued, now),
    reply.queued_truncated ? h("p", { class: "muted small" }, `Only the first ${queued.length} waiting jobs are listed.`) : null,
    h("h3", {}, "Running ", h("span", { class: "muted" }, "jobs holding capacity, and where")),
    holding.length === 0 ? h("p", { class: "empty", "data-testid": "no-holding-jobs" }, "No job holds capacity.") : holdingTable(holding, now),
  );
}

function jobCell(j) {
  return h("td", {}, h("span", { class: "mono" }, j.id), j.name ? h("span", { class: "muted" }, ` ${j.name}`) : null);
}

function tenantCell(tenant) {
  return h("td", {}, h("span", { class: "tenant-cell" }, swatch(tenant), tenant));
}

function asks(ask) {
  return h("div", { class: "chips" }, Object.entries(ask).map(([kind, value]) => h("span", { class: "chip" }, `${kindName(kind)} ${amount(kind, value)}`)));
}

function waitingTable(jobs, now) {
  return h(
    "table",
    { class: "table", "data-testid": "queued-jobs" },
    h("thead", {}, h("tr", {}, ["#", "Job", "Tenant", "Priority", "Asks", "Submitted (UTC)", "Why it waits"].map((t) => h("th", { scope: "col" }, t)))),
    h(
      "tbody",
      {},
      jobs.map((j) =>
        h(
          "tr",
          { "data-testid": "queued-job", "data-job": j.id, "data-tenant": j.tenant, "data-position": String(j.position) },
          h("td", { class: "num", title: `place ${j.position} in ${j.tenant}'s queue` }, number(j.position)),
          jobCell(j),
          tenantCell(j.tenant),
          h("td", { class: "num" }, number(j.priority)),
          h("td", {}, asks(j.ask)),
          h("td", { class: "nowrap muted" }, h("time", { datetime: j.submitted_at }, utcTime(j.submitted_at, now)), j.attempts ? ` · attempt ${j.attempts + 1}` : null),
          h("td", { class: "message", "data-testid": "waiting-reason" }, j.waiting_reason || ""),
        ),
      ),
    ),
  );
}

function holdingTable(jobs, now) {
  return h(
    "table",
    { class: "table", "data-testid": "holding-jobs" },
    h("thead", {}, h("tr", {}, ["Job", "Tenant", "State", "Asks", "Where", "Started (UTC)"].map((t) => h("th", { scope: "col" }, t)))),
    h(
      "tbody",
      {},
      jobs.map((j) =>
        h(
          "tr",
          { "data-testid": "holding-job", "data-job": j.id, "data-tenant": j.tenant, "data-state": j.state },
          jobCell(j),
          tenantCell(j.tenant),
          h("td", {}, h("span", { class: `kind tone-${STATE_TONES[j.state] || "info"}`, title: j.reason }, j.state), j.cancel_requested ? h("span", { class: "muted small" }, " · cancel requested") : null),
          h("td", {}, asks(j.ask)),
          h("td", { class: "nowrap", "data-testid": "job-where" }, where(j.placement)),
          h("td", { class: "nowrap muted" }, j.started_at ? h("time", { datetime: j.started_at }, utcTime(j.started_at, now)) : "–"),
        ),
      ),
    ),
  );
}

/** "h100-a GPU 4 · MIG 3g.40gb", "h100-a GPUs 0, 1 · whole GPU"; "not placed yet". */
function where(p) {
  if (!p || !p.node) return h("span", { class: "muted" }, "not placed yet");
  const gpus = p.gpu_indices.length ? ` GPU${p.gpu_indices.length === 1 ? "" : "s"} ${p.gpu_indices.join(", ")}` : "";
  const mode = p.mode === "mig" && p.mig_profile ? `MIG ${p.mig_profile}` : MODE_NAMES[p.mode] || p.mode;
  return `${p.node}${gpus}${mode ? ` · ${mode}` : ""}`;
}
