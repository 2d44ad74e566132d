// Building DOM nodes safely: every string from the API goes in as text (textContent or an
// attribute), never as HTML.

const SVG_NS = "http://www.w3.org/2000/svg";

/** An element with attributes and children; strings become text nodes. */
export function h(tag, attrs = {}, ...children) {
  return build(document.createElement(tag), attrs, children);
}

/** An SVG element (same rules as h). */
export function s(tag, attrs = {}, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attrs, children);
}

function build(node, attrs, children) {
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") node.setAttribute("class", value);
    else if (name === "style" && typeof value === "object") Object.assign(node.style, value);
    else if (name.startsWith("on") && typeof value === "function") {
      node.addEventListener(name.slice(2), value);
    } else node.setAttribute(name, String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** Replace a container's children. */
export function fill(container, ...children) {
  container.replaceChildren();
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    container.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

// Sixteen colours that carry white text; a tenant's is picked by a hash of its name.
const PALETTE = [
  "#4c9a3f", "#d0607e", "#b8860b", "#5a6b7d", "#3b6fb6", "#e07b24", "#8e5ba8", "#1f8ac0",
  "#2f9e8f", "#c8453c", "#8a6a4f", "#7a9a2e", "#c2569b", "#3f51b5", "#0097a7", "#a0522d",
];

/** A stable colour per tenant: FNV-1a of the name, mixed, picks from the palette, so the same
 * tenant has the same colour in every view and for every user. */
export function tenantColour(name) {
  let hash = 0x811c9dc5;
  for (const char of String(name)) {
    hash ^= char.codePointAt(0);
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  hash ^= hash >>> 15;
  hash = Math.imul(hash, 0x2c1b3c6d) >>> 0;
  hash ^= hash >>> 12;
  return PALETTE[(hash >>> 0) % PALETTE.length];
}

export function swatch(tenant) {
  return h("span", { class: "swatch", style: { background: tenantColour(tenant) }, "aria-hidden": "true" });
}

export const GIB = 1024;

export function gib(mib, digits = 1) {
  if (mib === null || mib === undefined) return "–";
  const value = mib / GIB;
  return `${value.toFixed(value >= 100 || Number.isInteger(value) ? 0 : digits)} GiB`;
}

export function number(value, digits = 0) {
  return Number(value).toLocaleString("en-US", {
    minimumFractionDigits: digits,
    maximumFractionDigits: digits,
  });
}

export function compact(value) {
  return Number(value).toLocaleString("en-US", { notation: "compact", maximumFractionDigits: 1 });
}

export function money(value, currency) {
  try {
    return Number(value).toLocaleString("en-US", { style: "currency", currency });
  } catch {
    return `${Number(value).toFixed(2)} ${currency}`;
  }
}

/** "07:21" in UTC, or "Nov 23 07:21" when not today. */
export function utcTime(iso, now = new Date()) {
  const at = new Date(iso);
  const hm = at.toISOString().slice(11, 16);
  if (at.toISOString().slice(0, 10) === now.toISOString().slice(0, 10)) return hm;
  const day = at.toLocaleDateString("en-US", { month: "short", day: "numeric", timeZone: "UTC" });
  return `${day} ${hm}`;
}
