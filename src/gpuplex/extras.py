"""The optional extras of the package, and the one check that a command's extra is installed.

`pip install gpuplex` serves one server: the control plane, the gateway, the host runtime and
`gpuplex up`, and every offline command (`validate`, `plan`, `explain`, `simulate
--compare-isolation`, `kube render`). Two extras add what only one command needs:

- `gpuplex[kube]`: the official Kubernetes client (and urllib3, its transport, whose errors
  gpuplex.kube.apply catches), for `gpuplex kube diff` and `kube apply`;
- `gpuplex[plots]`: matplotlib, for the PNG plots of `gpuplex simulate`.

A command that needs an extra calls `require_extra` before it starts its work, so a missing package
is one line naming the command and the `pip install` that adds it (ExtraMissing, exit 2), never a
traceback from deep inside the command. The check only looks the packages up (`find_spec`): the
modules that use them (gpuplex.kube.apply, the plot writers) still import them themselves, inside
the functions that need them.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.util import find_spec

from gpuplex.errors import ExtraMissing


@dataclass(frozen=True, slots=True)
class Extra:
    """One optional extra of pyproject.toml: what it is called in a sentence, and the top-level
    import names of the packages it adds."""

    what: str
    imports: tuple[str, ...]


#: Every extra a command may need, by its name in `pip install 'gpuplex[NAME]'`;
#: tests/architecture/test_declared_dependencies.py checks it against pyproject.toml.
EXTRAS: dict[str, Extra] = {
    "kube": Extra("the kubernetes client", ("kubernetes", "urllib3")),
    "plots": Extra("matplotlib", ("matplotlib",)),
}


def require_extra(extra: str, needed_by: str) -> None:
    """Raise ExtraMissing unless every package of `extra` can be imported. `needed_by` names what
    needs it, as the message's subject: `gpuplex kube apply`."""
    wanted = EXTRAS[extra]
    if not all(_installed(name) for name in wanted.imports):
        raise ExtraMissing(f"{needed_by} needs {wanted.what}: pip install 'gpuplex[{extra}]'")


def _installed(name: str) -> bool:
    try:
        return find_spec(name) is not None
    except (ImportError, ValueError):  # a finder that refuses it; a module without a spec
        return False
