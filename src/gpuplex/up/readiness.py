"""When `gpuplex up` may say it is up: once the gateway itself sees every model server answer its
health checks (its `gpuplex_gateway_backend_replicas_up` gauge, read from its /metrics with the
metrics token), so that the printed example succeeds on the first try. A progress line shows
which model servers are still starting; past the timeout, up says which never answered."""

from __future__ import annotations

import threading

from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from gpuplex.clock import now_s
from gpuplex.http_client import call

GAUGE = "gpuplex_gateway_backend_replicas_up"


def backends_up(exposition: str) -> dict[str, bool]:
    """backend -> whether at least one of its replicas passes the gateway's health checks."""
    found: dict[str, bool] = {}
    for family in text_string_to_metric_families(exposition):
        if family.name != GAUGE:
            continue
        for sample in family.samples:
            backend = sample.labels.get("backend", "")
            found[backend] = found.get(backend, False) or sample.value >= 1
    return found


def wait_for_model_servers(
    gateway_url: str,
    metrics_token: str,
    expected: int,
    stopping: threading.Event,
    console: Console,
    timeout_s: float,
) -> list[str]:
    """Wait until `expected` backends are up in the gateway's eyes (or a stop, or the timeout);
    returns the backends still down (names the gateway knows them by)."""
    headers = {"authorization": f"Bearer {metrics_token}"}
    deadline = now_s() + timeout_s
    seen: dict[str, bool] = {}
    with console.status("waiting for the model servers to answer ...") as status:
        while not stopping.is_set():
            try:  # loopback, our own gateway
                answer = call("GET", f"{gateway_url}/metrics", headers=headers, timeout_s=2)
                seen = backends_up(answer.body.decode()) if answer.ok else {}
            except (OSError, ValueError):
                seen = {}
            ready = sum(seen.values())
            if len(seen) >= expected and ready == len(seen):
                return []
            if now_s() >= deadline:
                break
            status.update(f"waiting for the model servers to answer: {ready} of {expected} up")
            stopping.wait(0.25)
    return sorted(name for name, up in seen.items() if not up) or ["(the gateway's view)"]
