"""A hung identity provider and a flood of tokens with made-up `kid`s cannot freeze gpuplex, against
the real provider (oidc-provider, stopped with SIGSTOP: it still accepts connections, in the
kernel, and never answers) and real `gpuplex server` and `gpuplex gateway` processes.

While tokens naming keys the provider never published arrive from many addresses at the control
plane and the gateway, each process asks the provider for its key set at most once per refresh
interval (10 s; a failed fetch backs off from there): counted by the kernel, as the connections
waiting in the stopped provider's accept queue, not by gpuplex. Meanwhile a gpuplex token at the
control plane, an API key at the gateway, `/healthz`, and valid provider tokens whose key is cached
keep answering: none of their requests takes as long as one wait on the hung provider (5 s), and
the p50 and p99 of each are printed beside their p99 before the flood (and kept in
test-artifacts/identity-provider-hang.txt)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from joserfc import jwt
from joserfc.jwk import RSAKey

from gpuplex.oidc.keys import TIMEOUT_S
from tests.abuse.front_door import start_control_plane
from tests.e2e.gateway.stack import Gateway, Stack, one_tenant_spec, stack_in, stop
from tests.oidc.provider import AUDIENCE, OidcProvider, provider_or_skip, signing_key

pytestmark = pytest.mark.lane

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
SECRET = "hung-provider-secret-0123456789abcdef"  # noqa: S105 - a test client's secret
GATEWAY_AUDIENCE = "urn:gpuplex:gateway"
REFRESH_S = 10  # gpuplex.oidc.keys: at most one fetch per issuer per this, whatever the kids
FLOOD_S = 16.0
#: The flood goes on past FLOOD_S until this many requests were answered, up to FLOOD_AT_MOST_S:
#: on a loaded machine the test's own clients (one Python process) send fewer than they ask for
#: (410 in 16 s once, where 3,200 are asked), and the flood must still be one.
FLOOD_REQUESTS = 500
FLOOD_AT_MOST_S = 60.0
FLOOD_CLIENTS = 40
FLOOD_ADDRESSES = 200  # 127.0.0.2 ... : an attacker with many addresses
PER_CLIENT_PER_S = 5  # 200 requests a second in all (one made-up kid froze gpuplex 5 s before)
#: A request that waits on the hung provider's key set waits this long at least (the fetch's
#: timeout): a caller none of whose requests took as long froze on nothing. The p99s are printed,
#: as measurements: on a loaded machine (CI, three other workers on two cores) they were 3-5x their
#: p99 before the flood, which says how busy the machine was, not whether anything froze.
PROVIDER_WAIT_S = TIMEOUT_S
WARM_UP_S = 2.0
#: What ends an attacker's request when its kept-alive connection closes under it, and how rare
#: that must stay.
CLOSED_CONNECTION_ERRORS = frozenset({"RemoteProtocolError", "ReadError"})
DROPPED_AT_MOST_ONE_IN = 500
BASELINE_S = 4.0

#: `auth.oidc`, added to the gateway tests' one-tenant spec (acme on a simulated model server).
AUTH = """\
auth:
  oidc:
    issuer: {issuer}
    client_id: gpuplex
    audience: "{audience}"
    roles:
      - {group: "gpu-{tenant}-viewers", role: tenant-viewer}
    gateway: {tenant_claim: gpuplex_tenant, audience: "{gateway_audience}"}
"""


@dataclass
class Front:
    provider: OidcProvider
    server_url: str
    gpt_token: str
    gateway: Gateway
    api_key: str
    api_token: str  # the provider's, for the control plane
    gateway_token: str  # the provider's, for the gateway
    flood_targets: list[tuple[str, str]]  # (url, a token naming a key nobody published)


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Front]:
    directory = tmp_path_factory.mktemp("hung-provider")
    provider = OidcProvider(
        directory,
        [signing_key("k1")],
        [
            {
                "client_id": "svc-acme",
                "client_secret": SECRET,
                "grant_types": ["client_credentials"],
                "redirect_uris": [],
                "response_types": [],
            }
        ],
        groups={"svc-acme": ["gpu-acme-viewers"]},
        claims={"svc-acme": {"gpuplex_tenant": "acme"}},
        audiences=[GATEWAY_AUDIENCE],
    )
    provider.start(provider_or_skip())
    server = None
    try:
        with stack_in() as stack:
            spec = spec_for(stack, provider)
            gateway = stack.gateway(spec)
            spec_path = directory / "gpuplex.yaml"
            spec_path.write_text(spec.replace("{gateway_port}", str(gateway.port)))
            server, port, gpt_token = start_control_plane(directory, spec_path)
            yield Front(
                provider=provider,
                server_url=f"http://127.0.0.1:{port}",
                gpt_token=gpt_token,
                gateway=gateway,
                api_key=stack.key("acme"),
                api_token=provider.client_token("svc-acme", SECRET),
                gateway_token=provider.client_token("svc-acme", SECRET, GATEWAY_AUDIENCE),
                flood_targets=flood_targets(provider.issuer, f"http://127.0.0.1:{port}", gateway),
            )
    finally:
        if server is not None:
            stop(server)
        with contextlib.suppress(ProcessLookupError):
            assert provider.process is not None
            os.killpg(provider.process.pid, signal.SIGCONT)
        provider.stop()


def spec_for(stack: Stack, provider: OidcProvider) -> str:
    return one_tenant_spec(stack.sim(["llama-8b"])) + (
        AUTH.replace("{issuer}", provider.issuer)
        .replace("{audience}", AUDIENCE)
        .replace("{gateway_audience}", GATEWAY_AUDIENCE)
    )


def waiting_connections(port: int) -> int:
    """Connections the kernel accepted for the listening socket on `port` that the process has
    not taken (its accept queue): for a stopped provider, every connection made to it."""
    waiting = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError), open(table) as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                local, state, queues = fields[1], fields[3], fields[4]
                if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:  # LISTEN
                    waiting += int(queues.split(":")[1], 16)
    return waiting


def flood_targets(issuer: str, server_url: str, gateway: Gateway) -> list[tuple[str, str]]:
    """400 requests with tokens naming keys the provider never published, half for each."""
    forger = RSAKey.generate_key(2048, parameters={"kid": "forger"})
    targets = []
    for n in range(400):
        url, audience = (
            (f"{server_url}/api/v1/tenants", AUDIENCE)
            if n % 2
            else (f"{gateway.url}/v1/models", GATEWAY_AUDIENCE)
        )
        claims = {
            "iss": issuer,
            "aud": audience,
            "sub": f"mallory-{n}",
            "exp": int(time.time()) + 3600,
        }
        token = jwt.encode({"alg": "RS256", "kid": f"made-up-{n}"}, claims, forger)
        targets.append((url, token))
    return targets


async def flood(
    front: Front, answers: dict[int | str, int], on_start: Callable[[float], None]
) -> None:
    """Made-up kids at both processes, from many loopback addresses, each client at most
    PER_CLIENT_PER_S requests a second, for FLOOD_S (`on_start` is told when that is), and on
    until FLOOD_REQUESTS were answered (within FLOOD_AT_MOST_S). `answers` counts each status, and
    each error that ended a request without one by its class name."""
    async with contextlib.AsyncExitStack() as clients:
        made = [
            await clients.enter_async_context(
                httpx.AsyncClient(
                    transport=httpx.AsyncHTTPTransport(
                        local_address=f"127.0.0.{2 + n % FLOOD_ADDRESSES}"
                    ),
                    timeout=30,
                )
            )
            for n in range(FLOOD_CLIENTS)
        ]
        counter = iter(range(10**9))
        started_at = time.monotonic()
        stop_at, give_up_at = started_at + FLOOD_S, started_at + FLOOD_AT_MOST_S
        on_start(stop_at)

        def going(now: float) -> bool:
            return now < stop_at or (sum(answers.values()) < FLOOD_REQUESTS and now < give_up_at)

        async def one_client(client: httpx.AsyncClient) -> None:
            while going(started := time.monotonic()):
                n = next(counter)
                url, token = front.flood_targets[n % len(front.flood_targets)]
                try:
                    reply = await client.get(url, headers={"authorization": f"Bearer {token}"})
                    answers[reply.status_code] = answers.get(reply.status_code, 0) + 1
                except httpx.HTTPError as error:
                    name = type(error).__name__
                    answers[name] = answers.get(name, 0) + 1
                await asyncio.sleep(max(0.0, 1 / PER_CLIENT_PER_S - (time.monotonic() - started)))

        await asyncio.gather(*(one_client(c) for c in made))


def probe(url: str, token: str | None, stop_at: float, seen: list[tuple[float, int]]) -> None:
    """One caller who did nothing wrong: a request every 20 ms, each timed."""
    headers = {"authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(timeout=30) as client:
        while time.monotonic() < stop_at:
            started = time.perf_counter()
            status = client.get(url, headers=headers).status_code
            seen.append((time.perf_counter() - started, status))
            time.sleep(0.02)


def p99(times: list[float]) -> float:
    return statistics.quantiles(times, n=100)[98]


def test_a_hung_provider_and_a_flood_of_made_up_kids_freeze_nothing(front: Front) -> None:
    probes = {
        "control plane, gpuplex token": (f"{front.server_url}/api/v1/tenants", front.gpt_token),
        "control plane, /healthz": (f"{front.server_url}/healthz", None),
        "control plane, provider token (key cached)": (
            f"{front.server_url}/api/v1/tenants",
            front.api_token,
        ),
        "gateway, API key": (f"{front.gateway.url}/v1/models", front.api_key),
        "gateway, provider token (key cached)": (
            f"{front.gateway.url}/v1/models",
            front.gateway_token,
        ),
    }
    for url, token in probes.values():  # each process has the key set before the provider hangs
        reply = httpx.get(url, headers={"authorization": f"Bearer {token}"} if token else {})
        assert reply.status_code == 200, (url, reply.text)
    run_probes(probes, time.monotonic() + WARM_UP_S)  # the processes' first requests, untimed
    baseline = run_probes(probes, time.monotonic() + BASELINE_S)  # no flood, the provider up
    assert front.provider.process is not None
    os.killpg(front.provider.process.pid, signal.SIGSTOP)
    hung_at = time.monotonic()
    waiting_before = waiting_connections(front.provider.port)
    answers: dict[int | str, int] = {}
    during: dict[str, list[tuple[float, int]]] = {}
    prober: list[threading.Thread] = []

    def start_probes(stop_at: float) -> None:  # once the flood runs: the callers, meanwhile
        prober.append(threading.Thread(target=lambda: during.update(run_probes(probes, stop_at))))
        prober[0].start()

    asyncio.run(flood(front, answers, start_probes))
    prober[0].join()
    fetches = waiting_connections(front.provider.port) - waiting_before
    os.killpg(front.provider.process.pid, signal.SIGCONT)
    hung_s = time.monotonic() - hung_at

    report = [
        f"flood: {sum(answers.values())} requests with made-up kids, answers {answers}",
        f"key-set fetches from both processes while the provider hung {hung_s:.1f} s: {fetches}",
        f"{'caller':44} {'requests':>8} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} "
        f"{'p99 before':>10} {'ratio':>6}",
    ]
    for name, timed in during.items():
        times, before = times_of(timed), p99(times_of(baseline[name]))
        report.append(
            f"{name:44} {len(times):8d} {statistics.median(times) * 1000:7.1f} "
            f"{p99(times) * 1000:7.1f} {max(times) * 1000:7.1f} {before * 1000:10.1f} "
            f"{p99(times) / before:6.2f}"
        )
    report.append(
        f"bound on each request: under {PROVIDER_WAIT_S:g} s, the least a wait on the hung provider "
        "takes"
    )
    print("\n" + "\n".join(report))  # noqa: T201 - the figures the issue asks to see
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "identity-provider-hang.txt").write_text("\n".join(report) + "\n")
    for name, timed in during.items():
        assert {status for _, status in timed} == {200}, (name, timed)
        assert len(timed) >= 100, name
        assert max(times_of(timed)) < PROVIDER_WAIT_S, name
    assert sum(answers.values()) >= FLOOD_REQUESTS  # the flood did arrive
    statuses = {answer for answer in answers if isinstance(answer, int)}
    assert statuses <= {401, 429, 503}, answers  # refused, throttled or "try again"
    # An attacker's request may end without an answer where its kept-alive connection closed
    # (once in 1,579 on a loaded machine); never by a timeout, which a frozen process would cause.
    dropped = {answer: n for answer, n in answers.items() if isinstance(answer, str)}
    assert set(dropped) <= CLOSED_CONNECTION_ERRORS, answers
    assert sum(dropped.values()) * DROPPED_AT_MOST_ONE_IN <= sum(answers.values()), answers
    # one fetch per process per interval at most (a failure backs off further)
    assert 1 <= fetches <= 2 * (1 + int(hung_s // REFRESH_S)), (fetches, hung_s)


def run_probes(
    probes: dict[str, tuple[str, str | None]], stop_at: float
) -> dict[str, list[tuple[float, int]]]:
    """Every probe, each in a thread of its own, until `stop_at`: (seconds, status) per request."""
    seen: dict[str, list[tuple[float, int]]] = {name: [] for name in probes}
    threads = [
        threading.Thread(target=probe, args=(url, token, stop_at, seen[name]))
        for name, (url, token) in probes.items()
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return seen


def times_of(timed: list[tuple[float, int]]) -> list[float]:
    return [t for t, _ in timed]
