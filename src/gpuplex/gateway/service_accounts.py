"""A tenant's service accounts calling the gateway with the identity provider's access tokens (the
client credentials grant), when the applied spec has `auth.oidc.gateway`: the token is verified
like the control plane's (gpuplex.oidc: signature with the issuer's keys, asymmetric algorithms
only, issuer, audience `auth.oidc.gateway.audience`, expiry), and its `tenant_claim` must name a
tenant of the revision served. The caller is then that tenant's, with the tenant's limits and
budget and every model of the tenant, metered under the account's identity
(`core.serve.service_accounts.account_prefix`).

Nothing here blocks the event loop on the provider: the issuer's keys are cached (gpuplex.oidc.keys);
when a token needs the key set fetched (first use, a new `kid` after rotation, the set's age), one
fetch per issuer runs at a time in the executor, and every request that needs it awaits that one.
A fetch that failed is not tried again for `RETRY_FETCH_S`: meanwhile, requests that need it are
answered 503 `identity_provider_unavailable`. A verified token is remembered by its SHA-256 until
the earlier of its `exp` and a minute, so its next requests cost a hash and a dictionary lookup.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from typing import Any

from gpuplex.clock import monotonic_s, now_s
from gpuplex.core.serve.service_accounts import (
    VERIFIED_TTL_S,
    ServiceAccount,
    VerifiedTokens,
    account_prefix,
    tenant_of,
    token_digest,
)
from gpuplex.core.spec.auth import OidcSpec
from gpuplex.errors import ErrorCode, IdentityProviderUnavailable, OidcTokenError
from gpuplex.gateway.api_errors import ApiError
from gpuplex.oidc.keys import IssuerKeys, IssuerKeysCache, kid_of

log = logging.getLogger(__name__)

#: After a failed fetch of an issuer's keys, requests that need one are refused this long.
RETRY_FETCH_S = 5.0


class ServiceAccounts:
    def __init__(
        self,
        issuers: IssuerKeysCache | None = None,
        *,
        ttl_s: float = VERIFIED_TTL_S,
        verified: VerifiedTokens | None = None,
    ) -> None:
        self._issuers = issuers if issuers is not None else IssuerKeysCache(now_s)
        self._ttl_s = ttl_s
        self._verified = verified if verified is not None else VerifiedTokens()
        self._fetching: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._failed: dict[str, tuple[float, str]] = {}  # issuer -> (when, why)
        self.fetches = 0  # key-set fetches started (for tests and logs)

    async def account(
        self, token: str, oidc: OidcSpec, tenants: Collection[str]
    ) -> ServiceAccount | None:
        """The service account `token` is, or None when it does not verify (any reason: the
        caller is told no more than for a bad key). IdentityProviderUnavailable as ApiError 503
        when the keys it needs cannot be had."""
        gateway = oidc.gateway
        audience = oidc.gateway_audience
        if gateway is None or audience is None:
            return None
        settings = (oidc.issuer, audience, gateway.tenant_claim)
        digest = token_digest(token)
        now = now_s()
        known = self._verified.get(digest, now)
        if known is not None and known.verified_by == settings:
            return known if known.tenant in tenants else None
        claims = await self._verified_claims(token, oidc, audience)
        if claims is None:
            return None
        tenant = tenant_of(claims, gateway.tenant_claim, tenants)
        if tenant is None:
            return None
        subject = str(claims["sub"])
        account = ServiceAccount(
            verified_by=settings,
            tenant=tenant,
            subject=subject,
            prefix=account_prefix(oidc.issuer, subject),
            expires_at_s=float(claims["exp"]),
        )
        self._verified.put(digest, account, now_s(), self._ttl_s)
        return account

    async def _verified_claims(
        self, token: str, oidc: OidcSpec, audience: str
    ) -> dict[str, Any] | None:
        issuer = self._issuers.of(oidc.issuer)
        try:
            kid = kid_of(token)
            keys = issuer.cached_key_set(kid)
            if keys is None:
                keys = await self._fetched(issuer, kid)
            return issuer.verify_with(keys, token, audience=audience, skew_s=oidc.clock_skew_s)
        except OidcTokenError:
            return None
        except IdentityProviderUnavailable as error:
            raise ApiError(
                ErrorCode.IDENTITY_PROVIDER_UNAVAILABLE,
                "the identity provider's keys cannot be read now, so the token cannot be "
                "checked; try again shortly, or use an API key",
                retry_after_s=int(RETRY_FETCH_S),
            ) from error

    async def _fetched(self, issuer: IssuerKeys, kid: str | None) -> dict[str, Any]:
        """The issuer's key set after a fetch: the one in flight, or one started now in the
        executor; IdentityProviderUnavailable within RETRY_FETCH_S of a failed one."""
        name = issuer.issuer
        running = self._fetching.get(name)
        if running is None:
            failed = self._failed.get(name)
            if failed is not None and monotonic_s() - failed[0] < RETRY_FETCH_S:
                raise IdentityProviderUnavailable(failed[1])
            loop = asyncio.get_running_loop()
            self.fetches += 1
            running = loop.run_in_executor(None, issuer.key_set, kid)
            self._fetching[name] = running
            running.add_done_callback(lambda done: self._fetch_done(name, done))
        return await asyncio.shield(running)

    def _fetch_done(self, issuer: str, done: asyncio.Future[dict[str, Any]]) -> None:
        self._fetching.pop(issuer, None)
        error = done.exception() if not done.cancelled() else None
        if isinstance(error, IdentityProviderUnavailable):
            log.error("cannot read the identity provider's keys: %s", error.message)
            self._failed[issuer] = (monotonic_s(), error.message)
        elif error is None:
            self._failed.pop(issuer, None)
