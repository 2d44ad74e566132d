"""`gpuplex kube extender`: run the kube-scheduler extender that places GPU pods by gpuplex's
placement policy (`gpuplex.kube.extender`), for the second scheduler `gpuplex kube render` emits
when the spec sets `kubernetes.scheduler`. Needs the `kube` extra."""

from __future__ import annotations

from typing import Annotated

import typer

from gpuplex.cli.conventions import reported
from gpuplex.cli.kube_options import ContextOption, KubeconfigOption
from gpuplex.consoles import stderr_console
from gpuplex.extras import require_extra

err = stderr_console()


def extender_command(
    policy: Annotated[
        str,
        typer.Option(
            help="The placement policy: best-fit, fgd, fgd-balanced, first-fit, gpu-packing or "
            "dot-product (`gpuplex simulate` compares them)."
        ),
    ] = "best-fit",
    host: Annotated[
        str, typer.Option(help="The address to listen on (0.0.0.0 inside a pod).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="The port to listen on.")] = 8890,
    context: ContextOption = None,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Run the kube-scheduler extender (HTTP filter and prioritize) until stopped.

    It reads nodes and pods from the API (list only) and answers kube-scheduler's calls for pods
    that ask nvidia.com/gpu or a MIG profile."""
    from gpuplex.kube.extender import EXTENDER_POLICIES

    if policy not in EXTENDER_POLICIES:
        raise typer.BadParameter(
            f"{policy!r} is not a policy the extender runs: {', '.join(EXTENDER_POLICIES)}",
            param_hint="--policy",
        )
    with reported():
        require_extra("kube", "gpuplex kube extender")
        import uvicorn

        from gpuplex.kube.apply import connect, parse_quantity
        from gpuplex.kube.extender_view import ClusterView
        from gpuplex.server.scheduler_extender import create_extender_app

        with connect(kubeconfig, context) as transport:
            app = create_extender_app(ClusterView(transport, parse_quantity, policy))
            err.print(
                f"gpuplex scheduler extender ({policy}) on http://{host}:{port}, API "
                f"{transport.address}",
                highlight=False,
                soft_wrap=True,
            )
            uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
