// Budgets beyond the bar: what a budget enforces at the gateway and the window its projection
// follows, and spend per API key (each key's share of its tenant's spend, by tokens).

import { h, money, number, swatch, utcTime } from "./dom.js";

const ENFORCED_TEXT = { throttle: "throttled", block: "blocked" };

/** The line under a budget's bar: its action, what is enforced now, and the projection's window. */
export function budgetNote(b) {
  const parts = [];
  if (b.enforced && b.enforced !== "alert") {
    parts.push(h("span", { class: `badge enforced-${b.enforced}`, "data-testid": "budget-enforced" }, `${ENFORCED_TEXT[b.enforced]} at the gateway`));
  }
  if (b.action && b.action !== "alert") {
    const soft = b.soft_percent !== null && b.soft_action !== "alert" ? ` · ${b.soft_action} from ${b.soft_percent}%` : "";
    parts.push(h("span", { class: "muted" }, `${b.action} at 100%${soft}${b.locked ? " · set by the platform" : ""}`));
  }
  parts.push(h("span", { class: "muted", "data-testid": "projection-window" }, projectionWindow(b)));
  return h("div", { class: "budget-note" }, parts);
}

function projectionWindow(b) {
  if (!b.projection_window_start) return "no spend yet to project from";
  const start = new Date(b.projection_window_start);
  const end = new Date(b.projection_window_end);
  const hours = (end - start) / 3_600_000;
  const span = hours >= 23.99 ? "the last 24 h" : `${number(hours, hours < 10 ? 1 : 0)} h since ${utcTime(b.projection_window_start)} UTC`;
  return `projected at the run rate of ${span}`;
}

/** Spend per API key of every tenant shown: one table, keys by spend. */
export function renderKeySpend(pages) {
  const rows = pages.flatMap((page) => page.keys.map((key) => ({ page, key })));
  if (rows.length === 0) return h("p", { class: "empty" }, "No API keys yet.");
  rows.sort((x, y) => Number(y.key.spend) - Number(x.key.spend) || x.key.name.localeCompare(y.key.name));
  return h(
    "table",
    { class: "table", "data-testid": "key-spend" },
    h("thead", {}, h("tr", {}, ["Tenant", "Key", "Requests", "Tokens", "Spend", "Budget"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, rows.map(keyRow)),
  );
}

function keyRow({ page, key }) {
  const budget = key.budget;
  return h(
    "tr",
    { "data-testid": "key-spend-row", "data-tenant": page.tenant, "data-key": key.name },
    h("td", {}, h("span", { class: "tenant-cell" }, swatch(page.tenant), page.tenant)),
    h("td", { title: key.prefixes.join(", ") }, key.name),
    h("td", { class: "num" }, number(key.requests)),
    h("td", { class: "num" }, number(key.tokens)),
    h("td", { class: "num" }, money(key.spend, page.currency)),
    h(
      "td",
      {},
      budget === null
        ? h("span", { class: "muted" }, "–")
        : [
            `${money(budget.amount, page.currency)} · ${budget.action}`,
            budget.enforced !== "alert" ? h("span", { class: `badge enforced-${budget.enforced}`, "data-testid": "key-enforced" }, ENFORCED_TEXT[budget.enforced]) : null,
          ],
    ),
  );
}
