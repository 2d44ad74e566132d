// The dashboard: sign in with a control-plane token (pasted, or a `#token=` link's, which never
// replaces a signed-in session unasked: tokenlink.js) or with the identity provider (a session
// cookie the server keeps; server/sign_in.py), then every 10 s fetch the GPU map, tenants,
// queues and jobs, usage, budgets and events and redraw. A tenant-scoped token sees only its own
// tenant: the API filters, and the page draws only what it is given.

import { ApiError, all, chooseTenant, chosenTenant, clearToken, currentSession, get, getToken, identityProvider, setToken, signOutOfSession, takeTokenFromAddress, tenantPath } from "./api.js";
import { renderKeySpend } from "./budgets.js";
import { hourlySeries, renderUsage, usageRange } from "./charts.js";
import { fill, h } from "./dom.js";
import { renderGpuMap } from "./gpumap.js";
import { renderLatency } from "./latency.js";
import { renderBudgets, renderEvents, renderTenants } from "./panels.js";
import { renderQueues } from "./queues.js";
import { askToSwitch } from "./tokenlink.js";

const REFRESH_MS = 10_000;
const $ = (id) => document.getElementById(id);
let timer = null;
let generation = 0; // a sign-out or new sign-in makes older refreshes drop their results
let scopeTenant = null; // the signed-in user's tenant; null for the platform

function showSignIn(message) {
  generation += 1;
  clearTimeout(timer);
  $("dashboard").hidden = true;
  $("whoami").hidden = true;
  $("signin").hidden = false;
  fill($("signin-error"), message || "");
  $("signin-error").hidden = !message;
  $("token-input").value = "";
  $("token-input").focus();
  offerIdentityProvider();
}

/** Show "Sign in with <issuer>" when the control plane takes its identity provider's sign-ins. */
async function offerIdentityProvider() {
  const provider = await identityProvider();
  $("oidc-signin").hidden = !provider;
  if (!provider) return;
  fill($("oidc-issuer"), new URL(provider.issuer).host);
  $("oidc-signin-link").href = `/auth/login?return_to=${encodeURIComponent(window.location.pathname)}`;
}

/** A failed sign-in comes back as `#signin_error=...`: say it once, then clear the address. */
function takeSignInError() {
  const params = new URLSearchParams(window.location.hash.replace(/^#/, ""));
  const said = params.get("signin_error");
  if (said === null) return null;
  window.history.replaceState(null, "", window.location.pathname + window.location.search);
  return `Signing in with the identity provider failed: ${said}`;
}

/** A person with roles on several tenants picks the one to show (sent as X-Gpuplex-Tenant). */
async function offerTenantChoice() {
  const picker = $("tenant-choice");
  picker.hidden = true;
  if (getToken()) return;
  const session = await currentSession();
  if (!session.signed_in) throw new ApiError(401, "unauthenticated", "the dashboard session ended: sign in again");
  if (session.platform || session.tenants.length < 2) {
    chooseTenant(null);
    return;
  }
  if (!session.tenants.includes(chosenTenant())) chooseTenant(session.tenants[0]);
  fill(picker, ...session.tenants.map((t) => h("option", { value: t }, t)));
  picker.value = chosenTenant();
  picker.hidden = false;
}

async function start() {
  const mine = ++generation;
  let me;
  try {
    await offerTenantChoice();
    me = await get("/whoami");
  } catch (error) {
    if (mine !== generation) return;
    if (error instanceof ApiError && error.status === 401) clearToken();
    const what = getToken() === null ? "Your session was not accepted" : "That token was not accepted";
    showSignIn(error instanceof ApiError && error.status === 401 ? `${what}: ${error.message}` : `Cannot reach the control plane: ${error.message}`);
    return;
  }
  if (mine !== generation) return;
  scopeTenant = me.tenant;
  fill($("whoami-name"), me.name);
  fill($("whoami-role"), me.role);
  fill($("whoami-tenant"), me.tenant ? `tenant ${me.tenant}` : "all tenants");
  $("whoami").hidden = false;
  $("signin").hidden = true;
  $("dashboard").hidden = false;
  await refresh(mine);
}

let inFlight = Promise.resolve(); // the refresh under way

function refresh(mine) {
  inFlight = fetchAndDraw(mine);
  return inFlight;
}

/** Stop refreshing and let the requests under way finish, so that ending a session does not cut
 * them off with a 401. */
async function stopRefreshing() {
  generation += 1;
  clearTimeout(timer);
  await inFlight.catch(() => {});
}

async function fetchAndDraw(mine) {
  const range = usageRange();
  const [nodes, tenants, events, queues] = await Promise.allSettled([get("/nodes"), all("/tenants"), get("/events", { limit: 25 }), get("/queues")]);
  const names = tenants.status === "fulfilled" ? tenants.value.map((t) => t.name) : [];
  const [usages, budgets, keySpends, latencies] = await Promise.all([
    Promise.allSettled(names.map((t) => get(tenantPath(t, "/usage"), { start: range.start.toISOString(), end: range.end.toISOString(), bucket_s: 3600 }))),
    Promise.allSettled(names.map((t) => get(tenantPath(t, "/budget")))),
    Promise.allSettled(names.map((t) => get(tenantPath(t, "/key-spend")))),
    Promise.allSettled(names.map((t) => get(tenantPath(t, "/latency")))),
  ]);
  if (mine !== generation) return;
  const everything = [nodes, tenants, events, queues, ...usages, ...budgets, ...keySpends, ...latencies];
  const rejected = everything.find((r) => r.status === "rejected" && r.reason instanceof ApiError && r.reason.status === 401);
  if (rejected) {
    clearToken();
    showSignIn(`Signed out: ${rejected.reason.message}`);
    return;
  }
  panel("gpu-map-body", nodes, (reply) => renderGpuMap(reply, scopeTenant));
  panel("tenants-body", tenants, renderTenants);
  panel("queues-body", queues, renderQueues);
  panel("usage-body", settledList(names, usages, (reply) => hourlySeries(reply, range)), (list) => renderUsage(list.map(({ tenant, value }) => ({ tenant, series: value })), range));
  panel("budgets-body", settledList(names, budgets, (b) => b), (list) => renderBudgets(list.map((x) => x.value)));
  panel("key-spend-body", settledList(names, keySpends, (page) => page), (list) => renderKeySpend(list.map((x) => x.value)));
  panel("latency-body", settledList(names, latencies, (l) => l), renderLatency);
  panel("events-body", events, renderEvents);
  const failed = everything.filter((r) => r.status === "rejected").length;
  fill($("status"), `Updated ${new Date().toISOString().slice(11, 19)} UTC · every ${REFRESH_MS / 1000} s`, failed ? ` · ${failed} request${failed === 1 ? "" : "s"} failed` : "");
  $("status").classList.toggle("status-error", failed > 0);
  document.body.dataset.loaded = "true";
  clearTimeout(timer);
  timer = setTimeout(() => refresh(mine).catch(reportError), REFRESH_MS);
}

/** The fulfilled replies of per-tenant requests as {tenant, value}; rejected if all failed. */
function settledList(names, results, map) {
  const ok = [];
  const errors = [];
  results.forEach((r, i) => (r.status === "fulfilled" ? ok.push({ tenant: names[i], value: map(r.value) }) : errors.push(r.reason)));
  if (ok.length === 0 && errors.length > 0) return { status: "rejected", reason: errors[0] };
  return { status: "fulfilled", value: ok };
}

function panel(id, result, render) {
  const body = $(id);
  if (result.status === "fulfilled") fill(body, render(result.value));
  else fill(body, h("p", { class: "panel-error", role: "alert" }, `Could not load: ${result.reason.message}`));
}

function reportError(error) {
  fill($("status"), `Refresh failed: ${error.message}`);
  $("status").classList.add("status-error");
  clearTimeout(timer);
  timer = setTimeout(() => refresh(generation).catch(reportError), REFRESH_MS);
}

/** Without a token: carry on with the identity-provider session this browser has, if any (its
 * cookie is HttpOnly, so the server says). */
async function resumeSession() {
  let session;
  try {
    session = await currentSession();
  } catch (error) {
    showSignIn(`Cannot reach the control plane: ${error.message}`);
    return;
  }
  if (session.signed_in) start();
  else showSignIn();
}

/** Who this tab is signed in as, asked of the server: {kind, name, role, tenant}, or null when
 * nobody is (a kept token the server refuses is dropped). Throws when the server cannot tell. */
async function signedInIdentity() {
  if (getToken()) {
    try {
      return { kind: "token", ...(await get("/whoami")) };
    } catch (error) {
      if (!(error instanceof ApiError && error.status === 401)) throw error;
      clearToken();
    }
  }
  const session = await currentSession();
  if (!session.signed_in) return null;
  await offerTenantChoice(); // a person on several tenants is asked about one of them
  return { kind: "session", ...(await get("/whoami")) };
}

/** A `#token=` link's token: used at once where nobody is signed in; where someone is, the page
 * goes on as them and asks, and switches (ending the session, or dropping the kept token) only
 * when told to. Where the server cannot say who is signed in, the link is dropped. */
async function followLink(linkedToken) {
  let current;
  try {
    current = await signedInIdentity();
  } catch (error) {
    showSignIn(`The link was not used: cannot tell who is signed in: ${error.message}`);
    return;
  }
  if (current === null) {
    setToken(linkedToken);
    await start();
    return;
  }
  const shown = start().catch(reportError); // the page as it is, behind the question
  if (current.kind === "token" && getToken() === linkedToken) return;
  if (!(await askToSwitch(current, linkedToken))) return;
  await shown;
  await stopRefreshing();
  if (current.kind === "session") {
    try {
      await signOutOfSession();
    } catch (error) {
      fill($("status"), `Not switched: signing out failed: ${error.message}`);
      $("status").classList.add("status-error");
      timer = setTimeout(() => refresh(generation).catch(reportError), REFRESH_MS);
      return;
    }
  }
  chooseTenant(null);
  setToken(linkedToken);
  await start();
}

let lastStep = Promise.resolve(); // the page's start and each link, one after another

function inTurn(step) {
  lastStep = lastStep.then(step).catch(reportError);
}

function main() {
  const linkedToken = takeTokenFromAddress();
  window.addEventListener("hashchange", () => {
    const token = takeTokenFromAddress();
    if (token) inTurn(() => followLink(token));
  });
  $("signin-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const token = $("token-input").value.trim();
    if (!token) return;
    setToken(token);
    start();
  });
  $("tenant-choice").addEventListener("change", (event) => {
    chooseTenant(event.target.value);
    start();
  });
  $("signout").addEventListener("click", async () => {
    chooseTenant(null);
    await stopRefreshing();
    if (getToken()) clearToken();
    else {
      try {
        await signOutOfSession();
      } catch (error) {
        showSignIn(`Signing out failed: ${error.message}`);
        return;
      }
    }
    showSignIn();
  });
  const signInError = takeSignInError();
  if (signInError !== null) showSignIn(signInError);
  else if (linkedToken) inTurn(() => followLink(linkedToken));
  else if (getToken()) inTurn(start);
  else inTurn(resumeSession);
}

main();
