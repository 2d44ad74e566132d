"""Who may do what on the control plane: roles, permissions and one decision function. Pure."""

from __future__ import annotations

from gpuplex.core.access.policy import (
    Permission,
    Principal,
    Role,
    Verdict,
    decide,
    may_grant,
    visible_tenants,
)

__all__ = ["Permission", "Principal", "Role", "Verdict", "decide", "may_grant", "visible_tenants"]
