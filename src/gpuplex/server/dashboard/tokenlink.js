// A `#token=` link signs in a tab where nobody is signed in. Where someone is (a session with the
// identity provider, or a token already in use), a link must not switch them silently: whoever
// made the link would have them work in the link's tenant, as the link's token, unawares. So the
// page asks, naming both identities as the server reports them, and keeping the current session
// is the default: Enter (on the focused "keep" button), Escape and closing the prompt all keep it.
// The link's token is held only by this prompt while it is open: never stored, never in the address.

import { describeToken } from "./api.js";
import { fill } from "./dom.js";

const $ = (id) => document.getElementById(id);

const HOW = {
  session: "signed in with the identity provider",
  token: "signed in with a token",
  link: "with the link's token",
};

/** Ask whether to leave `current` ({kind: "session" | "token", name, role, tenant}) for the
 * linked token. True only when the person picks "switch"; a token the server refuses is only
 * reported. */
export async function askToSwitch(current, linkedToken) {
  let linked = null;
  let refusal = null;
  try {
    linked = await describeToken(linkedToken);
  } catch (error) {
    refusal = error.message;
  }
  showIdentity("link-current", current, HOW[current.kind]);
  $("link-offer").hidden = linked === null;
  $("link-switch").hidden = linked === null;
  if (linked !== null) showIdentity("link-new", linked, HOW.link);
  fill($("link-refused"), refusal === null ? "" : `The link's token was not accepted (${refusal}); nothing changed.`);
  $("link-refused").hidden = refusal === null;
  return (await answered()) === "switch" && linked !== null;
}

function showIdentity(prefix, who, how) {
  fill($(`${prefix}-name`), who.name);
  fill($(`${prefix}-role`), who.role);
  fill($(`${prefix}-tenant`), who.tenant ? `tenant ${who.tenant}` : "all tenants");
  fill($(`${prefix}-how`), how);
}

/** Open the prompt with "keep" focused; the value of the button that closed it, "" for Escape. */
function answered() {
  const prompt = $("link-prompt");
  prompt.returnValue = "";
  return new Promise((resolve) => {
    prompt.addEventListener("close", () => resolve(prompt.returnValue), { once: true });
    prompt.showModal();
    $("link-keep").focus();
  });
}
