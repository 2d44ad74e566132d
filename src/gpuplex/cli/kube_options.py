"""Options that every `gpuplex kube` command talking to a cluster takes alike."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

ContextOption = Annotated[
    str | None, typer.Option(help="The kubeconfig context (default: its current context).")
]
KubeconfigOption = Annotated[
    Path | None,
    typer.Option(
        help="The kubeconfig (default: $KUBECONFIG, else ~/.kube/config, else the pod's "
        "service account)."
    ),
]
