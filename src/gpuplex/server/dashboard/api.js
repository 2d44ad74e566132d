// The REST API client: the token lives in sessionStorage and goes out as a Bearer header.

const TOKEN_KEY = "gpuplex.token";
export const API = "/api/v1";

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** Take `#token=...` from the address (so `gpuplex up` can print a ready link), keep it, and
 * remove it from the address bar and history. */
export function adoptTokenFromFragment() {
  const params = new URLSearchParams(window.location.hash.replace(/^#/, ""));
  const token = params.get("token");
  if (!token) return;
  setToken(token.trim());
  params.delete("token");
  const rest = params.toString();
  const clean = window.location.pathname + window.location.search + (rest ? `#${rest}` : "");
  window.history.replaceState(null, "", clean);
}

export function getToken() {
  return window.sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(token) {
  window.sessionStorage.setItem(TOKEN_KEY, token);
}

export function clearToken() {
  window.sessionStorage.removeItem(TOKEN_KEY);
}

export async function get(path, query = {}) {
  const url = new URL(API + path, window.location.origin);
  for (const [name, value] of Object.entries(query)) url.searchParams.set(name, value);
  const reply = await fetch(url, {
    headers: { Authorization: `Bearer ${getToken()}`, Accept: "application/json" },
    cache: "no-store",
  });
  if (!reply.ok) {
    let code = "http_error";
    let message = `${reply.status} ${reply.statusText}`;
    try {
      const body = await reply.json();
      if (body && body.error) ({ code, message } = body.error);
    } catch {
      // not JSON: keep the status line
    }
    throw new ApiError(reply.status, code, message);
  }
  return reply.json();
}

/** Every item of a paginated list. */
export async function all(path, query = {}) {
  const items = [];
  let cursor = null;
  do {
    const page = await get(path, cursor ? { ...query, cursor } : query);
    items.push(...page.items);
    cursor = page.next_cursor;
  } while (cursor);
  return items;
}

/** A tenant's path segment. */
export function tenantPath(tenant, rest = "") {
  return `/tenants/${encodeURIComponent(tenant)}${rest}`;
}
