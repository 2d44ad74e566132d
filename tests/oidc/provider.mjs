// oidc-provider (OpenID Certified, https://github.com/panva/node-oidc-provider) on loopback for
// gpuplex's identity tests. Usage: node provider.mjs PORT CONFIG.json, where the config holds the
// signing keys (jwks), the clients, the resource server's audience (and optionally more audiences a
// client may ask for with `resource`), per client or user the groups claim, and per client or user
// other claims its access tokens carry (`claims`, e.g. the tenant a service account belongs to).
// Client credentials (service accounts) and the device flow are enabled; access tokens for an
// audience are JWTs signed with RS256.
import fs from 'node:fs';
import Provider, { errors } from 'oidc-provider';

const [port, configPath] = process.argv.slice(2);
const config = JSON.parse(fs.readFileSync(configPath, 'utf8'));
const issuer = `http://127.0.0.1:${port}`;
const groupsOf = (id) => (config.groups || {})[id];
const claimsOf = (id) => (config.claims || {})[id];
const audiences = [config.audience, ...(config.audiences || [])];

const provider = new Provider(issuer, {
  clients: config.clients,
  jwks: config.jwks,
  claims: { openid: ['sub'], groups: ['groups'] },
  findAccount: (ctx, id) => ({
    accountId: id,
    claims: () => ({ sub: id, groups: groupsOf(id) || [] }),
  }),
  features: {
    clientCredentials: { enabled: true },
    deviceFlow: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => config.audience,
      getResourceServerInfo: (ctx, resource) => {
        if (!audiences.includes(resource)) throw new errors.InvalidTarget();
        return {
          scope: 'gpuplex',
          audience: resource,
          accessTokenFormat: 'jwt',
          jwt: { sign: { alg: 'RS256' } },
        };
      },
      useGrantedResource: () => true,
    },
  },
  // a person's (or a service account's) groups, and its other claims, ride in its access token
  extraTokenClaims: (ctx, token) => {
    const groups = (token.accountId && groupsOf(token.accountId)) || groupsOf(token.clientId);
    const other = (token.accountId && claimsOf(token.accountId)) || claimsOf(token.clientId);
    if (!groups && !other) return undefined;
    return { ...(other || {}), ...(groups ? { groups } : {}) };
  },
});
provider.listen(Number(port), '127.0.0.1', () => console.log(`listening ${issuer}`));
