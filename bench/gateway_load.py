"""Gateway benchmark, the load generator: `wrk`, run as a subprocess, in two ways, each read back
into one `Load`:

- closed loop: N connections each send their next request when the reply arrives; the most
  requests per second the setup gets through;
- paced: each connection waits an exponential think time before each request (wrk's Lua `delay()`
  hook), so the requests of all connections arrive at about a fixed rate, spread out as independent
  clients' would be: the latency distribution at, say, 1,000 req/s.

The numbers come from a Lua `done()` hook that prints them as JSON (exact counts, latency in µs).

Why not a fixed-rate tool: Debian has neither wrk2 nor vegeta, and `hey -q` (a rate per worker)
starts every worker's ticker at once, so its requests come in bursts of all workers together; the
percentiles then measure draining a burst, not the proxy. Paced connections are still closed
loops with think time: during a stall, each connection sends one request as its think time ends and
then waits. At 1,000 req/s over 50 connections (mean think time 50 ms), a stall of t ms is met by
about t requests, as a true fixed-rate generator would send, up to t of about 50 ms; only longer
stalls, when every connection is waiting, are understated (coordinated omission).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

CHAT_PATH = "/v1/chat/completions"
MODEL = "bench"  # the model name the backend serves and the requests ask for
TOOLS = ("wrk", "nginx")
CLOSED = "closed"  # Load.tool: closed loop
PACED = "paced"  # Load.tool: paced, about a fixed rate
WRK_MARK = "WRK_RESULT "


@dataclass(frozen=True)
class Load:
    """One run of one load generator against one URL."""

    tool: str  # CLOSED or PACED
    requests: int  # answered, any status
    duration_s: float
    rate_per_s: float  # answered per second
    p50_ms: float
    p99_ms: float
    errors: int  # non-2xx replies plus socket errors and timeouts
    error_detail: str  # what the errors were, "" when none


def chat_body(stream: bool, max_tokens: int = 16) -> str:
    body: dict[str, object] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Say something short about GPUs."}],
        "max_tokens": max_tokens,
    }
    if stream:
        body["stream"] = True
    return json.dumps(body, separators=(",", ":"))


def probe(base_url: str, key: str) -> str:
    """What one non-streaming and one streaming request get back, in a few words ("16 completion
    tokens; stream: 18 data events"), to check that two setups serve the same replies."""
    import httpx

    headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    said = []
    for stream in (False, True):
        try:
            reply = httpx.post(
                base_url + CHAT_PATH, content=chat_body(stream), headers=headers, timeout=10
            )
        except httpx.HTTPError as error:
            said.append(f"{'stream' if stream else 'reply'}: {type(error).__name__}: {error}")
            continue
        if reply.status_code != 200:
            said.append(f"{'stream' if stream else 'reply'}: HTTP {reply.status_code} {reply.text[:200]}")  # fmt: skip
        elif stream:
            events = sum(1 for line in reply.text.splitlines() if line.startswith("data:"))
            said.append(f"stream: {events} data events")
        else:
            usage = reply.json().get("usage") or {}
            said.append(f"{usage.get('completion_tokens')} completion tokens")
    return "; ".join(said)


def find_tool(name: str) -> str | None:
    """nginx lives in /usr/sbin, which a non-root PATH may not hold."""
    found = shutil.which(name)
    if found is None and Path(f"/usr/sbin/{name}").exists():
        found = f"/usr/sbin/{name}"
    return found


def missing_tools() -> list[str]:
    return [name for name in TOOLS if find_tool(name) is None]


_WRK_SCRIPT = """\
wrk.method = "POST"
wrk.body = [==[{body}]==]
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer {key}"

{pacing}
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{mark}{{"requests": %d, "duration_us": %d, "p50_us": %.1f, "p99_us": %.1f, ' ..
    '"connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d}}\\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect, e.read, e.write, e.status, e.timeout))
end
"""


#: wrk calls `delay()` before each request on a connection: an exponential think time of mean
#: `mean_ms` makes each connection's requests a Poisson stream, and many of them together arrive
#: at about connections / mean a second, evenly spread rather than in bursts.
_WRK_PACING = """\
math.randomseed({seed})
delay = function()
  return -math.log(1 - math.random()) * {mean_ms}
end
"""


def wrk_script(body: str, key: str, connections: int, rate_per_s: int | None) -> str:
    """The Lua script wrk runs: the POST, the JSON summary, and the pacing when there is a rate."""
    pacing = ""
    if rate_per_s is not None:
        mean_ms = 1000.0 * connections / rate_per_s
        pacing = _WRK_PACING.format(seed=connections * 7919 + rate_per_s, mean_ms=f"{mean_ms:.4f}")
    return _WRK_SCRIPT.format(body=body, key=key, mark=WRK_MARK, pacing=pacing)


def wrk(
    base_url: str,
    key: str,
    body: str,
    connections: int,
    duration_s: float,
    rate_per_s: int | None = None,
) -> Load:
    """Without `rate_per_s`: the most req/s `connections` connections get, each sending its next
    request on a reply (closed loop). With it: each connection waits an exponential think time of
    mean connections / rate before each request, so requests arrive at about that rate, spread out
    as independent clients' would be; the latency is then that of a server not pushed to its limit.
    The rate reached is a little below the target, by each request's own latency."""
    with tempfile.TemporaryDirectory(prefix="gpuplex-bench-wrk-") as directory:
        script = Path(directory) / "post.lua"
        script.write_text(wrk_script(body, key, connections, rate_per_s))
        command = [
            find_tool("wrk") or "wrk",
            "-t1",
            f"-c{connections}",
            f"-d{max(1, round(duration_s))}s",
            "--timeout",
            "5s",
            "-s",
            str(script),
            base_url + CHAT_PATH,
        ]
        output = _run(command, duration_s)
    line = next((s for s in output.splitlines() if s.startswith(WRK_MARK)), None)
    if line is None:
        raise RuntimeError(f"wrk printed no result:\n{output}")
    got = json.loads(line.removeprefix(WRK_MARK))
    duration = got["duration_us"] / 1e6
    errors = {k: got[k] for k in ("status", "connect", "read", "write", "timeout") if got[k]}
    detail = ", ".join(f"{n} {'non-2xx' if k == 'status' else k}" for k, n in errors.items())
    return Load(
        tool=PACED if rate_per_s is not None else CLOSED,
        requests=got["requests"],
        duration_s=duration,
        rate_per_s=got["requests"] / duration,
        p50_ms=got["p50_us"] / 1000,
        p99_ms=got["p99_us"] / 1000,
        errors=sum(errors.values()),
        error_detail=detail,
    )


def _run(command: list[str], duration_s: float) -> str:
    done = subprocess.run(  # noqa: S603 - the load generators, arguments built here
        command, capture_output=True, text=True, timeout=duration_s + 60, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command[:1])} exited with {done.returncode}:\n{done.stdout}{done.stderr}"
        )
    return done.stdout
