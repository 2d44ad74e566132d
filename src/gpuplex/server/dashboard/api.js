// The REST API client: a pasted token (or a `#token=` link's, taken as tokenlink.js says) lives in
// sessionStorage and goes out as a Bearer header; without one, the browser sends the session
// cookie of a sign-in with the identity provider (HttpOnly: this code never sees it), and changes
// carry its CSRF token.

const TOKEN_KEY = "gpuplex.token";
export const API = "/api/v1";

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** Take `#token=...` out of the address bar and history at once (so `gpuplex up` can print a
 * ready link without leaving the token behind); the token, not kept anywhere, or null. */
export function takeTokenFromAddress() {
  const params = new URLSearchParams(window.location.hash.replace(/^#/, ""));
  const token = params.get("token");
  if (token === null) return null;
  params.delete("token");
  const rest = params.toString();
  const clean = window.location.pathname + window.location.search + (rest ? `#${rest}` : "");
  window.history.replaceState(null, "", clean);
  return token.trim() || null;
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

const TENANT_KEY = "gpuplex.tenant";

/** For a person whose groups give roles on several tenants: the one this tab shows. */
export function chosenTenant() {
  return window.sessionStorage.getItem(TENANT_KEY);
}

export function chooseTenant(tenant) {
  if (tenant) window.sessionStorage.setItem(TENANT_KEY, tenant);
  else window.sessionStorage.removeItem(TENANT_KEY);
}

let sessionCsrf = null; // the CSRF token of the identity-provider session, from /auth/session

/** The identity-provider session: {signed_in, name, platform, tenants, expires_at, csrf_token}. */
export async function currentSession() {
  const session = await answer(await fetch("/auth/session", { headers: { Accept: "application/json" }, cache: "no-store" }));
  sessionCsrf = session.signed_in ? session.csrf_token : null;
  return session;
}

function headers(method) {
  const sent = { Accept: "application/json" };
  const token = getToken();
  if (token) sent.Authorization = `Bearer ${token}`;
  else {
    if (chosenTenant()) sent["X-Gpuplex-Tenant"] = chosenTenant();
    if (method !== "GET" && sessionCsrf) sent["X-CSRF-Token"] = sessionCsrf;
  }
  return sent;
}

export async function get(path, query = {}) {
  const url = new URL(API + path, window.location.origin);
  for (const [name, value] of Object.entries(query)) url.searchParams.set(name, value);
  return answer(await fetch(url, { headers: headers("GET"), cache: "no-store" }));
}

/** Who a token is, as the server says ({name, role, tenant}), asked with that token alone: no
 * session cookie, no tenant header, a read-only call. */
export async function describeToken(token) {
  const sent = { Accept: "application/json", Authorization: `Bearer ${token}` };
  return answer(await fetch(`${API}/whoami`, { headers: sent, credentials: "omit", cache: "no-store" }));
}

/** End the identity-provider session: the server forgets it, so its cookie stops working. */
export async function signOutOfSession() {
  const reply = await fetch("/auth/logout", { method: "POST", headers: headers("POST"), cache: "no-store" });
  sessionCsrf = null;
  if (reply.status !== 401) await answer(reply); // 401: it had ended already
}

/** Whether this control plane offers sign-in with an identity provider: {issuer} or null. */
export async function identityProvider() {
  try {
    const reply = await fetch("/auth/config", { cache: "no-store" });
    return reply.ok ? (await reply.json()).oidc : null;
  } catch {
    return null;
  }
}

async function answer(reply) {
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
