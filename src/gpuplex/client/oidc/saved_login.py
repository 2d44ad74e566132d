"""The token `gpuplex login` keeps for this user (`~/.config/gpuplex/login.json`, mode 600;
$GPUPLEX_LOGIN_FILE elsewhere), with its issuer and expiry. Commands that call the control plane use
it when neither --token nor $GPUPLEX_TOKEN is given, until it expires.

A person's token (device flow) is good until it expires; then they sign in again. A service
account's (client credentials) is renewed when it runs out: the file keeps where its secret comes
from (an environment variable's name or a file's path, never the secret) and asks the provider for
a new token then.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gpuplex.client.oidc.client_credentials import ServiceAccountClient, token_for
from gpuplex.settings import login_file

#: A token this close to its expiry is not used: it could expire on the way.
EXPIRY_MARGIN_S = 30.0


@dataclass(frozen=True, slots=True)
class Login:
    issuer: str
    access_token: str
    expires_at_s: float
    service_account: ServiceAccountClient | None = None


def save(login: Login, path: Path | None = None) -> Path:
    where = path or login_file()
    where.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(where, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    data: dict[str, Any] = {
        "issuer": login.issuer,
        "access_token": login.access_token,
        "expires_at": login.expires_at_s,
    }
    if login.service_account is not None:
        account = asdict(login.service_account)
        data["service_account"] = {**account, "scopes": list(login.service_account.scopes)}
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(data, out)
    os.chmod(where, 0o600)
    return where


def load(path: Path | None = None) -> Login | None:
    """The saved login, or None when there is none (or it cannot be read)."""
    try:
        data = json.loads((path or login_file()).read_text(encoding="utf-8"))
        account = data.get("service_account")
        return Login(
            issuer=str(data["issuer"]),
            access_token=str(data["access_token"]),
            expires_at_s=float(data["expires_at"]),
            service_account=(
                None
                if account is None
                else ServiceAccountClient(**{**account, "scopes": tuple(account["scopes"])})
            ),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def saved_token(now_s: float, path: Path | None = None) -> str | None:
    """The saved login's token while it is valid; a service account's renewed (and saved) once it
    has run out; None when there is none, or a person's has expired."""
    login = load(path)
    if login is None:
        return None
    if login.expires_at_s > now_s + EXPIRY_MARGIN_S:
        return login.access_token
    if login.service_account is None:
        return None
    token, expires_at_s = token_for(login.service_account, now_s)
    save(Login(login.issuer, token, expires_at_s, login.service_account), path)
    return token
