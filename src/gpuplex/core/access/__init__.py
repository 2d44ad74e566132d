"""Who may do what on the control plane: roles, actions and one decision function. Pure."""

from __future__ import annotations

from gpuplex.core.access.policy import (
    Action,
    Principal,
    Role,
    Verdict,
    decide,
    may_grant,
    visible_tenants,
)

__all__ = ["Action", "Principal", "Role", "Verdict", "decide", "may_grant", "visible_tenants"]
