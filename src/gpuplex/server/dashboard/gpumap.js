// The GPU map: per node, each GPU as a card whose track shows who holds what. MIG slices sit at
// their memory slots (start and size of 8); MPS shares are sized by thread %, time-slices by
// memory; a dedicated GPU is filled by its tenant. A model server that carries other tenants' LoRA
// adapters shows them as riders: a mark in their colour on its slice, and a legend entry with the
// server they ride on and their part of its tokens (what they pay of it). A job that holds a GPU
// (starting, running, or being stopped) is drawn where it runs like a replica, hatched, with its
// name or id and its state; a tenant-scoped page is given only its own tenant's jobs.

import { h, gib, swatch, tenantColour } from "./dom.js";

const MIG_SLOTS = 8;
const MODE_LABELS = {
  dedicated: "Dedicated",
  mig: "MIG",
  mps: "MPS",
  timeslice: "Time-sliced",
};

/** `scopeTenant`: the signed-in user's tenant, whose view holds only their own slices. */
export function renderGpuMap(nodesReply, scopeTenant = null) {
  const nodes = nodesReply.nodes || [];
  if (nodes.length === 0) {
    return h("p", { class: "empty" }, "No GPUs to show yet: no spec applied, or none of its GPUs hold your replicas.");
  }
  const tenants = new Set();
  const spans = new Map(); // how many GPUs each replica holds (said in its tooltip)
  const riders = new Map(); // rider tenant -> {server, share}
  for (const node of nodes) {
    for (const gpu of node.gpus) {
      for (const o of gpu.occupants) {
        tenants.add(o.tenant);
        spans.set(replicaKey(o), (spans.get(replicaKey(o)) || 0) + 1);
        collectRiders(o, riders);
      }
    }
  }
  const usedHere = (o) => o.used_memory_mib; // the API reports it per GPU
  return h(
    "div",
    { "data-testid": "gpu-map" },
    scopeTenant
      ? h("p", { class: "scope-note" }, `Only the GPUs, slices and jobs of tenant ${scopeTenant} are shown; unmarked space may be in use.`)
      : null,
    legend([...tenants].sort(), riders, nodesReply.rider_share_window_s),
    nodes.map((node) => renderNode(node, usedHere, spans)),
  );
}

function legend(tenants, riders, windowS) {
  const riderNames = [...riders.keys()].filter((t) => !tenants.includes(t)).sort();
  return h(
    "ul",
    { class: "legend", "data-testid": "gpu-legend", "aria-label": "Tenants" },
    tenants.map((t) => h("li", { "data-tenant": t }, swatch(t), t)),
    riderNames.map((t) => riderLegendItem(t, riders.get(t), windowS)),
  );
}

function collectRiders(o, riders) {
  for (const r of o.riders || []) {
    riders.set(r.tenant, { server: `${o.tenant}/${o.workload}`, share: r.token_share });
  }
}

function riderShareText(share, windowS) {
  const hours = Math.round((windowS || 86400) / 3600);
  if (share === null || share === undefined) return `no tokens in ${hours} h`;
  return `${Math.round(share * 100)}% of its tokens in ${hours} h`;
}

function riderLegendItem(tenant, rider, windowS) {
  return h(
    "li",
    { "data-tenant": tenant, "data-rider": rider.server, "data-testid": "gpu-legend-rider" },
    swatch(tenant),
    tenant,
    h("span", { class: "muted small" }, ` rides on ${rider.server} · ${riderShareText(rider.share, windowS)}`),
  );
}

function riderMarks(o) {
  return (o.riders || []).map((r) =>
    h("span", {
      class: "rider-mark",
      "data-testid": "gpu-rider",
      "data-tenant": r.tenant,
      title: `${r.tenant} rides here (LoRA ${r.model}): ${riderShareText(r.token_share)}`,
      style: { background: tenantColour(r.tenant) },
    }),
  );
}

function replicaKey(o) {
  return `${o.tenant}/${o.workload}#${o.replica}`;
}

/** What an occupant is called: `workload#n` for a replica, `job <name or id>` for a job. */
function occupantLabel(o) {
  return o.job ? `job ${o.job.name || o.job.id}` : `${o.workload}#${o.replica}`;
}

function occupantTitle(o) {
  if (!o.job) return `${o.tenant} / ${o.workload}#${o.replica}`;
  return `${o.tenant} / job ${o.job.id}${o.job.name ? ` (${o.job.name})` : ""} · ${o.job.state}`;
}

function renderNode(node, usedHere, spans) {
  const gpus = [...node.gpus].sort((a, b) => a.index - b.index);
  return h(
    "section",
    { class: "node", "data-testid": "node", "data-node": node.name },
    h("h3", { class: "node-name" }, node.name, h("span", { class: "muted" }, ` · ${gpus.length} GPU${gpus.length === 1 ? "" : "s"}`)),
    h("div", { class: "gpu-grid" }, gpus.map((gpu) => renderGpu(node.name, gpu, usedHere, spans))),
  );
}

function renderGpu(nodeName, gpu, usedHere, spans) {
  const mode = gpu.mode || "idle";
  const planned = gpu.occupants.reduce((sum, o) => sum + o.memory_mib, 0);
  const usedKnown = gpu.occupants.filter((o) => o.used_memory_mib !== null);
  const used = usedKnown.reduce((sum, o) => sum + usedHere(o), 0);
  return h(
    "article",
    {
      class: `gpu mode-${mode}`,
      "data-testid": "gpu",
      "data-node": nodeName,
      "data-gpu-index": gpu.index,
      "data-mode": mode,
    },
    h(
      "header",
      { class: "gpu-head" },
      h("span", { class: "gpu-index" }, `GPU ${gpu.index}`),
      h("span", { class: `mode-badge mode-${mode}` }, MODE_LABELS[mode] || "Idle"),
    ),
    h("div", { class: "gpu-model" }, gpu.model, gpu.pool ? h("span", { class: "muted" }, ` · pool ${gpu.pool}`) : null),
    renderTrack(gpu, mode, spans),
    h(
      "div",
      { class: "gpu-memory" },
      memoryBar(gpu.memory_mib, planned, usedKnown.length ? used : null),
      h(
        "span",
        { class: "muted small" },
        `${gib(planned)} of ${gib(gpu.memory_mib)} planned`,
        usedKnown.length ? ` · ${gib(used)} used` : "",
      ),
    ),
  );
}

function renderTrack(gpu, mode, spans) {
  const slice = (o, kind, left, width, label) => drawSlice(o, kind, left, width, label, spans.get(replicaKey(o)));
  const track = h("div", { class: `track track-${mode}`, role: "img", "aria-label": trackLabel(gpu, mode) });
  if (mode === "mig") {
    for (let slot = 0; slot < MIG_SLOTS; slot += 1) {
      track.append(h("span", { class: "slot", style: { left: pct(slot / MIG_SLOTS), width: pct(1 / MIG_SLOTS) } }));
    }
    for (const o of gpu.occupants) {
      const start = o.mig_start_slot ?? 0;
      const size = o.mig_size_slots ?? 1;
      const profile = o.mig_profile || "MIG";
      const sized = size > 1 ? profile : profile.split(".")[0];
      track.append(slice(o, "mig", start / MIG_SLOTS, size / MIG_SLOTS, o.job ? `${occupantLabel(o)} · ${sized}` : sized));
    }
    return track;
  }
  if (mode === "dedicated") {
    const share = 1 / Math.max(gpu.occupants.length, 1);
    gpu.occupants.forEach((o, i) => track.append(slice(o, "dedicated", i * share, share, occupantLabel(o))));
    return track;
  }
  if (mode === "mps" || mode === "timeslice") {
    const weightOf = (o) => (mode === "mps" && o.thread_percent ? o.thread_percent / 100 : o.memory_mib / gpu.memory_mib);
    const total = gpu.occupants.reduce((sum, o) => sum + weightOf(o), 0);
    const scale = total > 1 ? 1 / total : 1; // oversubscribed: draw to scale, side by side
    let left = 0;
    for (const o of gpu.occupants) {
      const width = weightOf(o) * scale;
      const share = mode === "mps" && o.thread_percent ? `${o.thread_percent}%` : gib(o.memory_mib, 0);
      const label = o.job ? `${occupantLabel(o)} · ${share}` : share;
      track.append(slice(o, mode, left, width, label));
      left += width;
    }
    return track;
  }
  track.append(h("span", { class: "idle-label" }, "idle"));
  return track;
}

function drawSlice(o, kind, left, width, label, span) {
  const lines = [
    occupantTitle(o),
    span > 1 ? `one of the ${span} GPUs this ${o.job ? "job" : "replica"} holds` : null,
    o.mig_profile ? `MIG ${o.mig_profile} (slots ${o.mig_start_slot}–${o.mig_start_slot + o.mig_size_slots - 1})` : null,
    o.thread_percent ? `MPS threads ${o.thread_percent}%` : null,
    `memory planned ${gib(o.memory_mib)}`,
    o.used_memory_mib !== null
      ? `memory used ${gib(o.used_memory_mib)}${span > 1 ? " on this GPU" : ""}`
      : "memory used: no sample yet",
    o.utilization_percent !== null && o.utilization_percent !== undefined
      ? `utilization ${Math.round(o.utilization_percent)}%`
      : null,
    ...(o.riders || []).map((r) => `rider ${r.tenant} (LoRA ${r.model}): ${riderShareText(r.token_share)}`),
  ].filter(Boolean);
  return h(
    "span",
    {
      class: `slice slice-${kind}${o.job ? " slice-job" : ""}`,
      "data-testid": "gpu-slice",
      "data-tenant": o.tenant,
      "data-workload": o.workload,
      "data-replica": o.replica,
      "data-job": o.job ? o.job.id : null,
      "data-job-state": o.job ? o.job.state : null,
      "data-kind": kind,
      "data-mig-profile": o.mig_profile,
      title: lines.join("\n"),
      tabindex: "0",
      style: { left: pct(left), width: pct(width), background: tenantColour(o.tenant) },
    },
    h("span", { class: "slice-label" }, label),
    riderMarks(o),
  );
}

function memoryBar(total, planned, used) {
  const bar = h("div", { class: "membar", "aria-hidden": "true" });
  bar.append(h("span", { class: "membar-planned", style: { width: pct(Math.min(planned / total, 1)) } }));
  if (used !== null) bar.append(h("span", { class: "membar-used", style: { width: pct(Math.min(used / total, 1)) } }));
  return bar;
}

function trackLabel(gpu, mode) {
  if (gpu.occupants.length === 0) return `GPU ${gpu.index}: idle`;
  const who = gpu.occupants.map((o) => (o.job ? `${o.tenant} ${occupantLabel(o)}` : `${o.tenant}/${o.workload}#${o.replica}`)).join(", ");
  return `GPU ${gpu.index} (${MODE_LABELS[mode] || mode}): ${who}`;
}

function pct(fraction) {
  return `${(fraction * 100).toFixed(3)}%`;
}
