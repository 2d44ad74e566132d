"""A tenant's service accounts calling the gateway with the identity provider's access tokens (the
client credentials grant), when the applied spec has `auth.oidc.gateway`: the token is verified
like the control plane's (gpuplex.oidc: signature with the issuer's keys, asymmetric algorithms
only, issuer, audience `auth.oidc.gateway.audience`, expiry), and its `tenant_claim` must name a
tenant of the revision served. The caller is then that tenant's, with the tenant's limits and
budget and every model of the tenant, metered under the account's identity
(`core.serve.service_accounts.account_prefix`).

Nothing here blocks the event loop on the provider: the issuer's keys are cached, fetched off the
request path and awaited (gpuplex.oidc.keys): a token whose key is cached never waits, whatever
other tokens are doing; one that needs a fetch awaits the one fetch in flight; while a failed
fetch's backoff runs, it is answered 503 `identity_provider_unavailable` with Retry-After. ID
tokens are refused unless `auth.oidc.accept_id_tokens`. A verified token is remembered by its SHA-256 until
the earlier of its `exp` and a minute, so its next requests cost a hash and a dictionary lookup.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

from gpuplex.clock import SYSTEM_CLOCK, Clock
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
from gpuplex.oidc.keys import IssuerKeysCache
from gpuplex.oidc.tokens import refuse_id_token

log = logging.getLogger(__name__)


class ServiceAccounts:
    def __init__(
        self,
        issuers: IssuerKeysCache | None = None,
        *,
        ttl_s: float = VERIFIED_TTL_S,
        verified: VerifiedTokens | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._clock = clock
        self._issuers = issuers if issuers is not None else IssuerKeysCache(clock)
        self._ttl_s = ttl_s
        self._verified = verified if verified is not None else VerifiedTokens()

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
        now = self._clock.now_s()
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
        self._verified.put(digest, account, self._clock.now_s(), self._ttl_s)
        return account

    async def _verified_claims(
        self, token: str, oidc: OidcSpec, audience: str
    ) -> dict[str, Any] | None:
        issuer = self._issuers.of(oidc.issuer)
        try:
            claims = await issuer.verified(token, audience=audience, skew_s=oidc.clock_skew_s)
            if not oidc.accept_id_tokens:
                refuse_id_token(token, claims)
            return claims
        except OidcTokenError:
            return None
        except IdentityProviderUnavailable as error:
            log.error("cannot read the identity provider's keys: %s", error.message)
            raise ApiError(
                ErrorCode.IDENTITY_PROVIDER_UNAVAILABLE,
                "the identity provider's keys cannot be read now, so the token cannot be "
                "checked; try again shortly, or use an API key",
                retry_after_s=error.retry_after_s or 1,
            ) from error
