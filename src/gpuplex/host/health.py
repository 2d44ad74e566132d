"""HTTP health checks of inference servers, on loopback, run side by side so that one slow server
never delays another's verdict."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from gpuplex.http_client import call


def probe(port: int, path: str, timeout_s: float) -> bool:
    """True when GET http://127.0.0.1:<port><path> answers 2xx or 3xx within the timeout."""
    try:
        answer = call(
            "GET",
            f"http://127.0.0.1:{port}{path}",
            headers={"User-Agent": "gpuplex-health"},
            timeout_s=timeout_s,
            deadline_s=timeout_s,
            max_bytes=64 * 1024,
            follow_redirects=False,
        )
    except OSError:
        return False
    return 200 <= answer.status < 400


class HealthProber:
    def __init__(self, max_parallel: int = 16) -> None:
        self._pool = ThreadPoolExecutor(max_workers=max_parallel, thread_name_prefix="health")

    def probe_all(self, checks: dict[str, tuple[int, str, float]]) -> dict[str, bool]:
        """label -> (port, path, timeout_s)  =>  label -> healthy."""
        futures = {
            label: self._pool.submit(probe, port, path, timeout)
            for label, (port, path, timeout) in checks.items()
        }
        return {label: future.result() for label, future in futures.items()}

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
