"""A route asks for the parts it uses, never the whole context (server/dependencies.py).

`ServerContext` (server/context.py) is the composition root: every part of the control plane,
built once at start-up and kept on `app.state.context`. Routes used to take all of it
(`ctx: Context`, `Context = Annotated[ServerContext, Depends(server_context)]`) and reach into it,
so no signature said what a route touched. Now each route and each helper it calls takes its parts
(`jobs: Jobs`, `clock: TheClock`...) or their named group (`BudgetBooks`, `SpecHistory`...).

This test fails when a module under server/routes/, or one of the route helpers below, imports
`ServerContext` or `server_context` (or the module that defines them), takes a parameter annotated
with either, or reads `app.state.context`. It failed on main before the change: every module under
server/routes/ then did all three (`from gpuplex.server.context import ServerContext,
server_context`, `ctx: ServerContext` on its helpers); the checker's own test below runs it on
such source. The threads started with the server (job_runner.py's JobRunner, run.py, the
scrapers) still take the context whole: building them is the composition root's work.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

SERVER = Path(__file__).resolve().parents[2] / "src" / "gpuplex" / "server"
CONTEXT_MODULE = "gpuplex.server.context"
WHOLE_CONTEXT = ("ServerContext", "server_context")
#: What routes call: they take parts too.
ROUTE_HELPERS = (
    "auth.py",
    "body_guard.py",
    "budget_alerts.py",
    "budget_enforcement.py",
    "credential_grants.py",
    "job_views.py",
    "oidc_principal.py",
    "queue_views.py",
    "sign_in.py",
    "spec_apply.py",
)


def whole_context_uses(sources: Iterable[tuple[str, str]]) -> list[str]:
    """`file:line what` of each import of the whole context, parameter annotated with it, and
    read of `app.state.context`."""
    found = []
    for name, source in sources:
        for node in ast.walk(ast.parse(source, filename=name)):
            if isinstance(node, ast.ImportFrom):
                names = [a.name for a in node.names]
                whole = [n for n in names if n in WHOLE_CONTEXT]
                if node.module == CONTEXT_MODULE and not whole:
                    whole = [f"{CONTEXT_MODULE} ({', '.join(names)})"]
                elif node.module == "gpuplex.server" and "context" in names:
                    whole = [CONTEXT_MODULE]
                found += [f"{name}:{node.lineno} imports {n}" for n in whole]
            elif isinstance(node, ast.Import):
                found += [
                    f"{name}:{node.lineno} imports {a.name}"
                    for a in node.names
                    if a.name == CONTEXT_MODULE
                ]
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                a = node.args
                for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
                    if arg is None or arg.annotation is None:
                        continue
                    shown = ast.unparse(arg.annotation)
                    if any(word in shown for word in WHOLE_CONTEXT):
                        found.append(f"{name}:{arg.lineno} {node.name}({arg.arg}: {shown})")
            elif (
                isinstance(node, ast.Attribute)
                and node.attr == "context"
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "state"
            ):
                found.append(f"{name}:{node.lineno} reads {ast.unparse(node)}")
    return found


def route_side_modules() -> list[Path]:
    routes = sorted((SERVER / "routes").glob("*.py"))
    return routes + [SERVER / helper for helper in ROUTE_HELPERS]


def test_the_checker_finds_the_whole_context_and_passes_parts() -> None:
    sources = [
        (
            "old_route.py",  # as every module under server/routes/ was on main
            "from gpuplex.server.context import ServerContext, server_context\n"
            "Context = Annotated[ServerContext, Depends(server_context)]\n"
            "def _job_of(ctx: ServerContext, tenant: str) -> Job: ...\n"
            "def show(tenant: str, ctx: Annotated[ServerContext, Depends(server_context)]): ...\n",
        ),
        ("module.py", "import gpuplex.server.context\nfrom gpuplex.server import context\n"),
        ("reach.py", "def f(request: Request) -> X:\n    return request.app.state.context\n"),
        (
            "new_route.py",
            "from gpuplex.server.dependencies import Jobs, TheClock\n"
            "from gpuplex.server.context import JobRunnerLead\n"
            "def show(tenant: str, jobs: Jobs, clock: TheClock, context: str = '') -> Job: ...\n",
        ),
    ]
    assert whole_context_uses(sources) == [
        "old_route.py:1 imports ServerContext",
        "old_route.py:1 imports server_context",
        "old_route.py:3 _job_of(ctx: ServerContext)",
        "old_route.py:4 show(ctx: Annotated[ServerContext, Depends(server_context)])",
        "module.py:1 imports gpuplex.server.context",
        "module.py:2 imports gpuplex.server.context",
        "reach.py:2 reads request.app.state.context",
        "new_route.py:2 imports gpuplex.server.context (JobRunnerLead)",
    ]


def test_routes_and_their_helpers_take_parts_not_the_whole_context() -> None:
    modules = route_side_modules()
    assert len(modules) > len(ROUTE_HELPERS) + 10, "server/routes/ moved?"
    found = whole_context_uses((str(p.relative_to(SERVER)), p.read_text()) for p in modules)
    assert not found, (
        "ask for the parts (gpuplex.server.dependencies), not the whole context:\n"
        + "\n".join(found)
    )
