"""Issue 38, end to end: `gpuplex up --real-commands` on simulated GPUs runs a real vLLM (on CPU) as
tenant acme's model server, as acme's own user in its cgroup, with the LoRA adapters of two
tenants on its shared base: acme's `acme-legal` and bolt's `bolt-chat`. `up`'s gateway serves it,
and the official `openai` client talks to the gateway:

- chat and completions, streamed with and without usage: every usage record is what vLLM itself
  counted (its `usage`, its `/tokenize`, or its `/metrics` counters around a stream that carried
  no usage to the client);
- each tenant reaches only its own models: bolt's key lists and calls `bolt-chat` alone, which
  runs on its adapter (the same answer as vLLM gives for `bolt/chat` directly); an unknown model,
  and another tenant's, is 404;
- the shared base is billed to the tenants that used it, in proportion to their tokens;
- the host runtime's health check waits for vLLM's real `/health` (no restart while it loads),
  and the gateway's readiness follows it: `starting`, then `ready`, `down` while the server does
  not answer, `ready` again;
- a granted folder acme's user cannot read is refused by `up` at its line in the spec, before
  anything is applied.

gpuplex reads no model server's `/metrics` itself (docs/gateway.md says so): the test reads vLLM's
to check the gateway's counts."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import Omit, OpenAI
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionStreamOptionsParam

from gpuplex.host.interpreter import reachable_by_others
from gpuplex.host.state import StateDir
from tests.abuse.host.uprun import UpRun, free_port, remove, shared_base
from tests.e2e.gateway.stack import cannot_run_gateway
from tests.vllm_real import install
from tests.vllm_real.server import BASE_NAME, ModelFiles, vllm_command, vllm_env

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(1200),
    pytest.mark.skipif(
        os.geteuid() != 0, reason="tenants run as users of their own, in cgroups, only as root"
    ),
]

TOKEN = re.compile(r"#token=(gpt_[A-Za-z0-9_-]+)")
#: vLLM takes 50-75 s to answer /health here; the host runtime's default start_timeout_s is 600.
READY_WITHIN_S = 600.0
#: How long the mover may take to put a request's usage record in the store.
RECORDED_WITHIN_S = 30.0
MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Tell me about the sea."}]
PROMPT = "The capital of the sea is"


# --- the stack ----------------------------------------------------------------------------------


@dataclass
class Served:
    run: UpRun
    keys: dict[str, str]
    admin_token: str
    vllm_url: str
    model: Path  # the granted copy of the model and its adapters
    seen: list[tuple[float, int, dict[str, Any]]] = field(default_factory=list)  # /healthz
    #: what the tests asked of vLLM directly, not through the gateway, as vLLM counted it
    direct: list[tuple[int, int]] = field(default_factory=list)
    #: one openai client per tenant, closed with the stack (an unclosed one leaks its sockets)
    clients: dict[str, OpenAI] = field(default_factory=dict)

    @property
    def state_dir(self) -> Path:
        return self.run.state_dir

    def client(self, tenant: str) -> OpenAI:
        if tenant not in self.clients:
            url = f"{self.run.gateway_url}/v1"
            self.clients[tenant] = OpenAI(base_url=url, api_key=self.keys[tenant])
        return self.clients[tenant]

    def close_clients(self) -> None:
        for client in self.clients.values():
            client.close()

    def replica(self) -> dict[str, Any]:
        state = json.loads((self.state_dir / "host" / "state.json").read_text())
        found: dict[str, Any] = next(
            r for r in state["records"] if r["desired"]["workload"] == "chat"
        )
        return found

    def events(self, target: str = "acme/chat#0") -> list[dict[str, Any]]:
        path = self.state_dir / "host" / "events.jsonl"
        lines = path.read_text().splitlines()
        return [e for e in map(json.loads, lines) if e["target"] == target]

    def healthz(self) -> tuple[int, dict[str, Any]]:
        reply = httpx.get(f"{self.run.gateway_url}/healthz", timeout=10)
        return reply.status_code, reply.json()

    def record(self, request_id: str) -> dict[str, Any]:
        """The usage record of a request, once the gateway's mover has stored it."""
        deadline = time.monotonic() + RECORDED_WITHIN_S
        while time.monotonic() < deadline:
            rows = self.records(f"request_id = '{request_id}'")
            if rows:
                return rows[0]
            time.sleep(0.2)
        raise AssertionError(f"no usage record for {request_id} in {RECORDED_WITHIN_S:g} s")

    def records(self, where: str = "1") -> list[dict[str, Any]]:
        database = self.state_dir / "store" / "gpuplex.db"
        with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
            db.row_factory = sqlite3.Row
            rows = db.execute(f"select * from usage_records where {where}").fetchall()  # noqa: S608
        return [dict(row) for row in rows]

    def tokenized(self, **body: Any) -> int:
        """vLLM's own count of a prompt (`messages` through its chat template, or `prompt`)."""
        reply = httpx.post(f"{self.vllm_url}/tokenize", json={"model": BASE_NAME, **body})
        reply.raise_for_status()
        count: int = reply.json()["count"]
        return count

    def vllm_counts(self) -> tuple[int, int]:
        """vLLM's (prompt, generated) token counters from its own /metrics."""
        text = httpx.get(f"{self.vllm_url}/metrics", timeout=10).text
        return _counter(text, "vllm:prompt_tokens_total"), _counter(
            text, "vllm:generation_tokens_total"
        )

    def counted_by_vllm(self, send: Callable[[], str]) -> tuple[str, tuple[int, int]]:
        """Run `send` (nothing else in flight) and what vLLM's counters grew by meanwhile, once
        they have settled (they follow the reply by a moment)."""
        before = self.vllm_counts()
        request_id = send()
        deadline = time.monotonic() + 15
        grown, settled_since = (0, 0), time.monotonic()
        while time.monotonic() < deadline:
            after = self.vllm_counts()
            now = (after[0] - before[0], after[1] - before[1])
            if now != grown:
                grown, settled_since = now, time.monotonic()
            elif grown[0] > 0 and time.monotonic() - settled_since > 0.5:
                break
            time.sleep(0.1)
        return request_id, grown

    def ask_vllm(self, model: str, prompt: str, max_tokens: int) -> str:
        """A greedy completion straight from vLLM (`model` as vLLM names it), counted in
        `direct`."""
        answer: list[str] = []

        def send() -> str:
            reply = httpx.post(
                f"{self.vllm_url}/v1/completions",
                json={"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0},
                timeout=60,
            )
            reply.raise_for_status()
            answer.append(reply.json()["choices"][0]["text"])
            return ""

        _, counted = self.counted_by_vllm(send)
        self.direct.append(counted)
        return answer[0]


def _counter(metrics: str, name: str) -> int:
    total = 0.0
    for line in metrics.splitlines():
        if line.startswith((name + "{", name + " ")):
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


def tenant_runnable_vllm(base: Path, stack: contextlib.ExitStack) -> tuple[str, str]:
    """(interpreter, PYTHONPATH) with which a tenant's user runs vLLM. The vLLM venv is built under
    ~/.cache (tests/vllm_real/install.py), and its interpreter links to one under /root: where
    other users cannot enter it, the venv is shown to them read-only at `base/vllm` (a bind
    mount, undone after), and the system's interpreter of the same version runs it."""
    venv = install.venv_dir()
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    python = shutil.which(version, path="/usr/bin:/usr/local/bin")
    if python is None or not reachable_by_others(Path(python).resolve()):
        pytest.skip(f"no {version} that tenants' users can run (the vLLM venv's version)")
    if not reachable_by_others(venv):
        shown = base / "vllm"
        shown.mkdir(mode=0o755)
        bound = subprocess.run(  # noqa: S603 - fixed argv
            ["/bin/mount", "--bind", str(venv), str(shown)], capture_output=True, check=False
        )
        if bound.returncode != 0:
            pytest.skip(f"cannot show the vLLM venv to tenants: {bound.stderr.decode()}")
        stack.callback(subprocess.run, ["/bin/umount", "--lazy", str(shown)], check=False)
        subprocess.run(  # noqa: S603 - fixed argv
            ["/bin/mount", "-o", "remount,bind,ro", str(shown)], check=True
        )
        venv = shown
    site = venv / "lib" / version / "site-packages"
    if not (site / "vllm").is_dir():
        pytest.skip(f"no vllm in {site}")
    return python, str(site)


def granted_copy(model: ModelFiles, base: Path) -> ModelFiles:
    """The model and its adapters copied where tenants' users can read them (pytest's folders
    are root's, 700), world-readable."""
    root = base / "model"
    shutil.copytree(model.root, root)
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return ModelFiles(
        root=root,
        base=root / model.base.relative_to(model.root),
        loras={name: root / path.relative_to(model.root) for name, path in model.loras.items()},
    )


def vllm_spec(model: ModelFiles, python: str, pythonpath: str, vllm_port: int) -> dict[str, Any]:
    """acme serves the base with two adapters: its own (`acme/legal`, lora-a) and bolt's
    (`bolt/chat`, lora-b), named as the gateway names riders; each folder granted in `reads`."""
    adapters = {"acme/legal": model.loras["lora-a"], "bolt/chat": model.loras["lora-b"]}
    command = vllm_command(model.base, vllm_port, BASE_NAME, adapters)
    command[0] = python  # the venv's own links to a Python under /root
    serve = {"model": "acme-chat", "base_model": BASE_NAME, "accepts_adapters": True}
    return {
        "version": 1,
        "fleet": {"nodes": [{"name": "box", "gpus": [{"model": "H100-80GB", "count": 1}]}]},
        "tenants": [
            {
                "name": "acme",
                "isolation": "dedicated",
                "workloads": [
                    {
                        "name": "chat",
                        "gpu": {"count": 1},
                        "serve": {**serve, "port": vllm_port},
                        "command": command,
                        "env": vllm_env({}) | {"PYTHONPATH": pythonpath, "PATH": "/usr/bin:/bin"},
                        "reads": [str(model.base), *(str(p) for p in adapters.values())],
                        # the default start_timeout_s (600 s) waits for vLLM; once it has been
                        # ready, it may miss checks for 50 s (the test stops it for a few)
                        "health": {
                            "http_path": "/health",
                            "interval_s": 5,
                            "failure_threshold": 10,
                        },
                        "restart": {"stop_grace_s": 20},
                    },
                    {"name": "legal", "serve": {"model": "acme-legal", "lora_of": "acme/chat"}},
                ],
            },
            {
                "name": "bolt",
                "requirement": "moderate",  # may ride another tenant's server
                "workloads": [
                    {"name": "chat", "serve": {"model": "bolt-chat", "lora_of": "acme/chat"}}
                ],
            },
        ],
        "gateway": {"port": free_port(), "health_interval_s": 0.5},
        "pricing": {"currency": "USD", "gpu_hour": {"H100-80GB": "3.60"}},
    }


class HealthzWatch(threading.Thread):
    """Polls the gateway's /healthz from `up`'s start, keeping each change."""

    def __init__(self, url: str, seen: list[tuple[float, int, dict[str, Any]]]) -> None:
        super().__init__(daemon=True)
        self.url, self.seen, self.stopping = url, seen, threading.Event()

    def run(self) -> None:
        last = None
        while not self.stopping.wait(0.25):
            try:
                reply = httpx.get(f"{self.url}/healthz", timeout=2)
                now = (reply.status_code, reply.json())
            except (httpx.HTTPError, ValueError):
                continue
            if now != last:
                self.seen.append((time.monotonic(), *now))
                last = now


@pytest.fixture(scope="module")
def served(vllm_model: ModelFiles) -> Iterator[Served]:
    why_not = cannot_run_gateway()
    if why_not:
        pytest.skip(why_not)
    base = shared_base()
    with contextlib.ExitStack() as stack:
        stack.callback(remove, base)
        python, pythonpath = tenant_runnable_vllm(base, stack)
        model = granted_copy(vllm_model, base)
        vllm_port = free_port()
        run = UpRun(base, vllm_spec(model, python, pythonpath, vllm_port))
        stack.callback(run.kill)
        seen: list[tuple[float, int, dict[str, Any]]] = []
        watch = HealthzWatch(run.gateway_url, seen)
        watch.start()
        stack.callback(watch.stopping.set)
        run.start("--real-commands")
        keys = run.wait_for_banner(timeout_s=240)
        token = TOKEN.search(run.output())
        assert token is not None, run.output()
        up = Served(run, keys, token[1], f"http://127.0.0.1:{vllm_port}", model.root, seen)
        deadline = time.monotonic() + READY_WITHIN_S
        while up.healthz()[1]["status"] != "ok":
            assert time.monotonic() < deadline, f"vLLM not ready:\n{_vllm_log(up)}"
            assert run.process is not None
            assert run.process.poll() is None, run.output()
            time.sleep(1)
        try:
            yield up
        finally:
            up.close_clients()
        watch.stopping.set()
        assert run.stop(timeout_s=120) == 0, run.output()


def _vllm_log(up: Served) -> str:
    logs = up.state_dir / "host" / "logs" / "acme"
    return "\n".join(
        f"{path.name}:\n" + "\n".join(path.read_text(errors="replace").splitlines()[-30:])
        for path in sorted(logs.glob("chat-0.*.log"))
    )


# --- the tests ----------------------------------------------------------------------------------


def test_up_runs_the_real_vllm_as_acmes_user_in_its_cgroup_and_says_so(served: Served) -> None:
    output = served.run.output()
    assert "  for real     acme/chat: their own commands, on simulated GPUs" in output
    assert "stand-ins    " not in output  # --real-commands: nothing simulated but the GPUs
    replica = served.replica()
    pid = replica["pid"]
    command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert b"vllm.entrypoints.launchers.api_server.entry" in command
    instance = StateDir(served.state_dir / "host").instance
    user = pwd.getpwnam(f"gpx-{instance[:6]}-acme")
    status = Path(f"/proc/{pid}/status").read_text()
    assert re.search(rf"^Uid:\s+{user.pw_uid}\s", status, re.MULTILINE), status
    assert f"gpuplex/{instance}/" in Path(f"/proc/{pid}/cgroup").read_text()
    assert replica["cgroups"]


def test_the_health_check_waits_for_vllm_to_start_and_the_gateway_follows_it(
    served: Served,
) -> None:
    deadline = time.monotonic() + 10  # its checks while it starts run every 2 s
    while "healthy" not in (kinds := [e["kind"] for e in served.events()]):
        assert time.monotonic() < deadline, kinds
        time.sleep(0.2)
    events = served.events()
    assert kinds[:2] == ["started", "healthy"], kinds  # no failed check, no restart meanwhile
    assert "health_failed" not in kinds
    assert "exited" not in kinds
    started, healthy = (datetime.fromisoformat(e["at"]) for e in events[:2])
    took_s = (healthy - started).total_seconds()
    print(f"vLLM answered /health {took_s:.0f} s after its start, as acme's user")  # noqa: T201
    assert served.replica()["restarts"] == 0
    # the gateway said `starting` while vLLM loaded (no replica is sent a request), then ready;
    # the watch polls on its own every 0.25 s, so it may record `ready` a little after the fixture
    # saw it: wait for that (generously), then read the whole history
    ready = (200, {"total": 1, "ready": 1, "starting": 0, "down": 0})
    deadline = time.monotonic() + 30
    while (states := [(status, body["backends"]) for _, status, body in served.seen])[-1:] != [
        ready
    ]:
        assert time.monotonic() < deadline, states
        time.sleep(0.1)
    starting = {"total": 1, "ready": 0, "starting": 1, "down": 0}
    assert (200, starting) in states, states
    assert states[-1] == ready


def test_chat_and_completions_are_billed_as_vllm_counted_them(served: Served) -> None:
    client = served.client("acme")
    raw = client.chat.completions.with_raw_response.create(
        model="acme-chat",
        messages=MESSAGES,
        max_tokens=12,
        temperature=0,
    )
    chat = raw.parse()
    assert chat.model == "acme-chat"
    assert chat.usage is not None
    assert chat.usage.prompt_tokens == served.tokenized(messages=MESSAGES)
    record = served.record(raw.headers["x-request-id"])
    assert (record["prompt_tokens"], record["completion_tokens"]) == (
        chat.usage.prompt_tokens,
        chat.usage.completion_tokens,
    )
    assert (record["tenant"], record["model"], record["status"]) == ("acme", "acme-chat", 200)

    raw_completion = client.completions.with_raw_response.create(
        model="acme-chat", prompt=PROMPT, max_tokens=10, temperature=0
    )
    completion = raw_completion.parse()
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == served.tokenized(prompt=PROMPT)
    record = served.record(raw_completion.headers["x-request-id"])
    assert (record["prompt_tokens"], record["completion_tokens"]) == (
        completion.usage.prompt_tokens,
        completion.usage.completion_tokens,
    )


def _streamed(served: Served, endpoint: str, include_usage: bool) -> tuple[str, list[Any]]:
    client = served.client("acme")
    options: ChatCompletionStreamOptionsParam | Omit = (
        {"include_usage": True} if include_usage else openai.omit
    )
    raw: Any
    if endpoint == "chat":
        raw = client.chat.completions.with_raw_response.create(
            model="acme-chat", messages=MESSAGES, max_tokens=14, temperature=0, stream=True,
            stream_options=options,
        )  # fmt: skip
    else:
        raw = client.completions.with_raw_response.create(
            model="acme-chat", prompt=PROMPT, max_tokens=14, temperature=0, stream=True,
            stream_options=options,
        )  # fmt: skip
    chunks = list(raw.parse())
    return str(raw.headers["x-request-id"]), chunks


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_streams_with_and_without_usage_are_billed_as_vllm_counted_them(
    served: Served, endpoint: str
) -> None:
    request_id, chunks = _streamed(served, endpoint, include_usage=True)
    usage = chunks[-1].usage
    assert usage is not None
    assert chunks[-1].choices == []  # the usage chunk, as vLLM sends it
    record = served.record(request_id)
    assert (record["prompt_tokens"], record["completion_tokens"]) == (
        usage.prompt_tokens,
        usage.completion_tokens,
    )
    assert record["stream"]

    without: list[Any] = []

    def send() -> str:
        request_id, chunks = _streamed(served, endpoint, include_usage=False)
        without.extend(chunks)
        return request_id

    request_id, (prompt, generated) = served.counted_by_vllm(send)
    assert without
    assert all(getattr(chunk, "usage", None) is None for chunk in without)  # not asked, not sent
    record = served.record(request_id)
    assert (record["prompt_tokens"], record["completion_tokens"]) == (prompt, generated)
    assert prompt == (
        served.tokenized(messages=MESSAGES)
        if endpoint == "chat"
        else served.tokenized(prompt=PROMPT)
    )


def test_each_tenant_reaches_only_its_own_models_and_adapters(served: Served) -> None:
    acme, bolt = served.client("acme"), served.client("bolt")
    assert sorted(m.id for m in acme.models.list().data) == ["acme-chat", "acme-legal"]
    assert [m.id for m in bolt.models.list().data] == ["bolt-chat"]

    answers = {}
    for client, model in ((acme, "acme-chat"), (acme, "acme-legal"), (bolt, "bolt-chat")):
        raw = client.completions.with_raw_response.create(
            model=model, prompt=PROMPT, max_tokens=16, temperature=0
        )
        reply = raw.parse()
        assert reply.model == model  # named as the tenant called it, never the adapter's name
        answers[model] = reply.choices[0].text
        record = served.record(raw.headers["x-request-id"])
        assert record["model"] == model
        assert reply.usage is not None
        assert record["prompt_tokens"] == reply.usage.prompt_tokens
        assert record["completion_tokens"] == reply.usage.completion_tokens
    # each ran on its own weights: vLLM answers the same for the adapter's name, asked directly
    for model, upstream in (
        ("acme-chat", BASE_NAME),
        ("acme-legal", "acme/legal"),
        ("bolt-chat", "bolt/chat"),
    ):
        assert served.ask_vllm(upstream, PROMPT, 16) == answers[model], (model, upstream)
    assert len(set(answers.values())) == 3  # the adapters' random weights change the answer

    for client, model in (
        (bolt, "acme-chat"),  # another tenant's model
        (bolt, "acme-legal"),
        (bolt, "acme/legal"),  # an adapter's name on the server
        (bolt, BASE_NAME),  # the server's own name
        (acme, "bolt-chat"),
        (acme, "no-such-model"),
    ):
        with pytest.raises(openai.NotFoundError) as refused:
            client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=4)
        assert refused.value.code == "model_not_found", (model, refused.value)


def test_the_shared_base_is_billed_to_its_tenants_by_their_tokens(served: Served) -> None:
    for tenant, model in (("acme", "acme-chat"), ("bolt", "bolt-chat"), ("bolt", "bolt-chat")):
        raw = served.client(tenant).chat.completions.with_raw_response.create(
            model=model,
            messages=MESSAGES,
            max_tokens=8,
        )
        served.record(raw.headers["x-request-id"])
    records = served.records()
    first = min(datetime.fromisoformat(r["started_at"]) for r in records).replace(tzinfo=UTC)
    window_s = 300
    start = datetime.fromtimestamp(first.timestamp() // window_s * window_s, UTC)
    end = datetime.now(UTC).replace(microsecond=0)
    headers = {"authorization": f"Bearer {served.admin_token}"}
    api = f"http://127.0.0.1:{served.run.port}/api/v1"
    body = {"start": start.isoformat(), "end": end.isoformat()}
    rolled = httpx.post(f"{api}/meter/rollup", json=body, headers=headers, timeout=60)
    assert rolled.status_code == 200, rolled.text
    assert rolled.json()["window_s"] == window_s
    query = {"start": start.isoformat(), "end": (end + timedelta(seconds=window_s)).isoformat()}
    reply = httpx.get(
        f"{api}/usage", params={**query, "bucket_s": window_s, "source": "allocation"},
        headers=headers, timeout=60,
    )  # fmt: skip
    assert reply.status_code == 200, reply.text
    gpu_seconds: dict[tuple[str, str], dict[str, Fraction]] = {}
    for point in reply.json()["points"]:
        if point["metric"] == "gpu_seconds" and point["tenant"]:
            window = gpu_seconds.setdefault((point["start"], point["dimension"]), {})
            window[point["tenant"]] = Fraction(point["quantity"])
    assert gpu_seconds, reply.json()
    for (window_start, dimension), parts in gpu_seconds.items():
        opened = datetime.fromisoformat(window_start)
        closed = opened + timedelta(seconds=window_s)
        tokens: dict[str, int] = {}
        for r in records:
            at = datetime.fromisoformat(r["started_at"]).replace(tzinfo=UTC)
            if opened <= at < closed:
                tokens[r["tenant"]] = (
                    tokens.get(r["tenant"], 0) + r["prompt_tokens"] + r["completion_tokens"]
                )
        whole = sum(parts.values(), Fraction(0))
        total_tokens = sum(tokens.values())
        if total_tokens == 0:  # nobody sent it a token: its owner reserved it
            assert set(parts) == {"acme"}, (window_start, parts)
            continue
        assert set(parts) == {t for t, n in tokens.items() if n > 0}, (window_start, parts, tokens)
        for tenant, part in parts.items():
            exact = whole * tokens[tenant] / total_tokens
            assert abs(part - exact) <= Fraction(len(parts), 10**12), (dimension, tenant, part)
        print(  # noqa: T201
            f"window {window_start} {dimension}: {float(whole):.3f} GPU-seconds split "
            + ", ".join(
                f"{t} {float(p):.3f} ({tokens[t]} tokens)" for t, p in sorted(parts.items())
            )
        )
    assert any("bolt" in parts for parts in gpu_seconds.values())  # the rider pays its part


def test_every_usage_record_adds_up_to_vllms_own_counters(served: Served) -> None:
    """Whatever the tests sent through the gateway: vLLM counted exactly the tokens billed, and
    besides them only what the tests asked of it directly."""
    served.ask_vllm(BASE_NAME, PROMPT, 4)  # one direct call at least, whatever ran before
    records = served.records()
    billed = (
        sum(r["prompt_tokens"] for r in records),
        sum(r["completion_tokens"] for r in records),
    )
    direct = (sum(p for p, _ in served.direct), sum(g for _, g in served.direct))
    assert records
    assert (billed[0] + direct[0], billed[1] + direct[1]) == served.vllm_counts()


def test_the_gateways_readiness_follows_vllms_real_health(served: Served) -> None:
    pid = served.replica()["pid"]
    os.kill(pid, signal.SIGSTOP)  # vLLM's API server stops answering, /health included
    try:
        deadline = time.monotonic() + 20
        while served.healthz()[1]["backends"]["down"] != 1:
            assert time.monotonic() < deadline, served.healthz()
            time.sleep(0.2)
        status, body = served.healthz()
        assert status == 200  # the gateway itself still serves (and bills)
        assert body["status"] == "degraded"
        assert body["problems"] == [
            "1 of 1 model servers have no replica that answers its health check (0 starting, "
            "1 down): requests to their models get 503 until one does"
        ]
        with pytest.raises(openai.APIStatusError) as refused:
            served.client("bolt").with_options(max_retries=0).chat.completions.create(
                model="bolt-chat",
                messages=MESSAGES,
                max_tokens=4,
            )
        assert refused.value.status_code == 503
    finally:
        os.kill(pid, signal.SIGCONT)
    deadline = time.monotonic() + 30
    while served.healthz()[1]["status"] != "ok":
        assert time.monotonic() < deadline, served.healthz()
        time.sleep(0.2)
    reply = served.client("bolt").chat.completions.create(
        model="bolt-chat",
        messages=MESSAGES,
        max_tokens=4,
    )
    assert reply.choices
    assert served.replica()["pid"] == pid  # the host runtime did not restart it meanwhile
    assert served.replica()["restarts"] == 0


def test_a_granted_folder_acmes_user_cannot_read_is_refused_at_its_line(
    vllm_model: ModelFiles, served: Served
) -> None:
    """The fixture's own model folder is behind pytest's 700 folders: acme's user cannot enter
    them. `up` refuses the spec naming the field and its line, and applies nothing."""
    base = shared_base()
    try:
        spec = vllm_spec(vllm_model, "/usr/bin/python3", "/nonexistent", free_port())
        run = UpRun(base, spec)
        run.start("--real-commands")
        assert run.wait(120) != 0
        output = " ".join(run.output().split())
        lines = run.spec_path.read_text().splitlines()
        line = max(n for n, text in enumerate(lines, 1) if text.strip() == f"- {vllm_model.base}")
        assert re.search(
            rf"{run.spec_path}:{line}:\d+: tenants\[0\]\.workloads\[0\]\.reads\[0\]: tenant "
            rf"acme's user gpx-\w+-acme cannot enter /tmp/pytest-of-root above it",
            output,
        ), output
        assert "Traceback" not in output
        assert not (run.state_dir / "host" / "desired.json").exists()
        database = run.state_dir / "store" / "gpuplex.db"
        with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
            applied = db.execute("select count(*) from spec_revisions").fetchone()[0]
        assert applied == 0  # nothing was applied
    finally:
        run.kill()
        remove(base)
