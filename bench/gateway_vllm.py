"""Gateway benchmark in front of a real vLLM: what the gateway adds to a model server that does real
work, against calling that server directly in the same run.

    make vllm                                             # once per machine (~6 min)
    .venv/bin/python bench/gateway.py --vllm [--duration-s 8] [--rounds 3] [--connections 4]
                                             [--rate 6] [--paced-connections 12]
                                             [--one-by-one 100] [--json FILE]

The backend is vLLM's OpenAI server on CPU (tests/vllm_real/server.py: the tiny random-weight
Llama the tests build, float32, eager), serving it as `bench`. Three setups, each measured with
non-streaming chat (max_tokens 16, temperature 0: the same reply every time) and streaming, by wrk in two ways (bench/gateway_load.py):
- closed loop, --connections connections (default 4): req/s, and CPU per request, read from
  /proc for the gateway's process group and for vLLM's (API server, engine core, worker);
- paced at about --rate req/s (default 6) over --paced-connections connections (default 12, each
  waiting an exponential think time of mean 2 s): p50 and p99, far under what vLLM serves on 2
  cores (about 40 req/s with 4 clients), so the latency is a request's own, not a queue's.
Setups: vLLM direct (the baseline), the gateway with no limits (1 worker), and the gateway with
every feature on (1 worker, limits in memory): the same `GatewaySetup`s as bench/gateway.py's rows,
started side by side against the one vLLM. In each of --rounds rounds every row runs for every
setup back to back, the order reversed from row to row, so the drift of a shared machine hits
all alike. Reported per setup and mode: medians over rounds of req/s, of p50/p99, of the added
p50/p99 (the setup's percentile minus vLLM direct's in the same round) and of req/s over vLLM
direct's in the same round; CPU per request over all closed-loop runs. Before the runs, each
gateway's CPU while idle (ms per second: health checks, usage flushes) is measured over 5 s and
printed, as part of its CPU per request at these low rates.

Latency under wrk moves with the machine from round to round by more than a gateway adds, so the
run ends with a measurement that pairs requests instead: one client, one request at a time,
--one-by-one requests per setup and mode (default 100), each setup's i-th request sent right after
the others' (in rotating order); the added latency is the median of the per-request differences
from vLLM direct's, and the difference of the p99s over the same requests.

About 70 s to build the model and start vLLM, then 2 modes x 2 ways x 3 setups x --rounds runs of
--duration-s, then the one-at-a-time requests: about 8 minutes in all with the defaults on 2
cores. The results live in bench/gateway_vllm_report.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
from rich.console import Console
from rich.markup import escape
from tests.e2e.gateway.stack import cannot_run_gateway
from tests.vllm_real.server import VllmServer, build_model, missing, start_vllm

from bench.gateway_load import CHAT_PATH, CLOSED, MODEL, chat_body, find_tool, wrk
from bench.gateway_procs import Processes, Running, group_cpu_s
from bench.gateway_report import MODES, STREAMING
from bench.gateway_vllm_report import (
    DIRECT,
    FULL,
    PLAIN,
    ROWS,
    SETUPS,
    VllmOptions,
    VllmResults,
    VllmRun,
    print_results,
)
from bench.planner_measure import machine


class VllmBench:
    def __init__(self, options: VllmOptions, results: VllmResults, status: Console) -> None:
        self.options = options
        self.results = results
        self.status = status

    def say(self, text: str) -> None:
        self.status.print(escape(text))

    def run(self, procs: Processes) -> None:
        keys = procs.keys()
        self.say("building the tiny model (tests/vllm_real/model_builder.py)")
        model = build_model(procs.tmp / "model")
        server = start_vllm(
            model,
            procs.tmp / "vllm.log",
            served_name=MODEL,
            loras=(),
            extra_args=("--disable-uvicorn-access-log",),
            # vLLM closes a connection idle for 5 s; a paced client waits longer than that now and
            # then, and would count each such close as an error: 75 s, as gpuplex sim model's
            environment={"VLLM_HTTP_TIMEOUT_KEEP_ALIVE": "75"},
            say=self.say,
        )
        self.results.vllm_start_s = round(server.started_s, 1)
        try:
            self.measure(procs, server, keys)
        finally:
            server.stop()

    def measure(self, procs: Processes, server: VllmServer, keys: dict[str, str]) -> None:
        port = server.url.rsplit(":", 1)[1]
        gateways: dict[str, Running] = {}
        for gateway_setup in (PLAIN, FULL):
            self.say(f"starting {gateway_setup.label}")
            key = keys[gateway_setup.tenant]
            gateways[gateway_setup.label] = procs.gateway(gateway_setup, int(port), key, "")
        urls = {DIRECT: server.url} | {label: g.url for label, g in gateways.items()}
        key_of = {DIRECT: keys["plain"], PLAIN.label: keys["plain"], FULL.label: keys["full"]}
        for setup in SETUPS:
            self.results.replies[setup] = said(urls[setup], key_of[setup])
            self.say(f"{setup}: warming up ({self.results.replies[setup]})")
            wrk(urls[setup], key_of[setup], greedy_body(False), self.options.connections, self.options.warmup_s)  # fmt: skip
        self.idle(gateways)
        if len(set(self.results.replies.values())) > 1:
            self.results.notes.append(
                "the setups' replies differ: "
                + "; ".join(f"{s}: {said}" for s, said in self.results.replies.items())
            )
        for round_ in range(self.options.rounds):
            for j, (mode, tool) in enumerate(ROWS):
                order = SETUPS if (round_ + j) % 2 == 0 else SETUPS[::-1]
                for setup in order:
                    gateway = gateways.get(setup)
                    self.one(setup, urls[setup], key_of[setup], mode, tool, round_, server, gateway)
        if self.options.one_by_one:
            self.one_by_one(urls, key_of)
        for label, running in gateways.items():
            problems = running.log_problems()
            if problems:
                self.results.notes.append(f"{label}: its log has " + "; ".join(problems[:5]))
            procs.stop(running)

    def one_by_one(self, urls: dict[str, str], key_of: dict[str, str]) -> None:
        """One request at a time, each setup's i-th right after the others', in rotating order."""
        n = self.options.one_by_one
        clients = {
            setup: httpx.Client(
                base_url=urls[setup],
                headers={
                    "authorization": f"Bearer {key_of[setup]}",
                    "content-type": "application/json",
                },
                timeout=30,
            )
            for setup in SETUPS
        }
        try:
            for mode in MODES:
                self.say(f"one request at a time, {mode}: {n} per setup")
                body = greedy_body(mode == STREAMING)
                took: dict[str, list[float]] = {setup: [] for setup in SETUPS}
                for i in range(n):
                    for setup in SETUPS[i % 3 :] + SETUPS[: i % 3]:
                        took[setup].append(_time_one(clients[setup], body))
                self.results.one_by_one[mode] = took
        except httpx.HTTPError as error:
            self.results.notes.append(f"one request at a time: {type(error).__name__}: {error}")
        finally:
            for client in clients.values():
                client.close()

    def idle(self, gateways: dict[str, Running], seconds: float = 5.0) -> None:
        self.say(f"measuring the gateways' CPU while idle ({seconds:g} s)")
        before = {label: group_cpu_s(g.process.pid) for label, g in gateways.items()}
        time.sleep(seconds)
        for label, running in gateways.items():
            spent_s = group_cpu_s(running.process.pid) - before[label]
            self.results.idle_cpu_ms_per_s[label] = round(spent_s * 1000 / seconds, 1)

    def one(
        self,
        setup: str,
        url: str,
        key: str,
        mode: str,
        tool: str,
        round_: int,
        server: VllmServer,
        gateway: Running | None,
    ) -> None:
        o = self.options
        time.sleep(o.pause_s)
        vllm_before = group_cpu_s(server.process.pid)
        gateway_before = group_cpu_s(gateway.process.pid) if gateway else 0.0
        body = greedy_body(mode == STREAMING)
        try:
            if tool == CLOSED:
                load = wrk(url, key, body, o.connections, o.duration_s)
            else:
                load = wrk(url, key, body, o.paced_connections, o.duration_s, o.rate_per_s)
        except RuntimeError as error:
            self.results.notes.append(f"{setup} · {mode} · {tool}, round {round_ + 1}: {error}")
            return
        gateway_cpu = group_cpu_s(gateway.process.pid) - gateway_before if gateway else None
        vllm_cpu = group_cpu_s(server.process.pid) - vllm_before
        self.results.runs.append(VllmRun(setup, mode, round_, load, gateway_cpu, vllm_cpu))
        errors = f", {load.errors} errors: {load.error_detail}" if load.errors else ""
        self.say(
            f"  round {round_ + 1} · {setup} · {mode} · {tool}: {load.rate_per_s:,.1f} req/s, "
            f"p50 {load.p50_ms:.1f} ms, p99 {load.p99_ms:.1f} ms{errors}"
        )


def greedy_body(stream: bool) -> str:
    """bench/gateway.py's chat request at temperature 0: every setup's reply is then the same 16
    tokens. (Not in the same number of stream events: vLLM sends in one event the tokens that
    queued up since its last send, so the count varies from run to run, direct too.)"""
    body = json.loads(chat_body(stream)) | {"temperature": 0}
    return json.dumps(body, separators=(",", ":"))


def said(url: str, key: str) -> str:
    """What one non-streaming and one streaming request get back, in a few words: the tokens and
    the text, to check that every setup serves the same reply."""
    headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    try:
        whole = httpx.post(url + CHAT_PATH, content=greedy_body(False), headers=headers, timeout=30)
        streamed = httpx.post(
            url + CHAT_PATH, content=greedy_body(True), headers=headers, timeout=30
        )
    except httpx.HTTPError as error:
        return f"{type(error).__name__}: {error}"
    if whole.status_code != 200 or streamed.status_code != 200:
        return f"HTTP {whole.status_code}, stream HTTP {streamed.status_code}"
    answer = whole.json()
    text = answer["choices"][0]["message"]["content"]
    events = [
        line[len("data: ") :] for line in streamed.text.splitlines() if line.startswith("data: ")
    ]
    chunks = [json.loads(event) for event in events if event != "[DONE]"]
    stream_text = "".join(
        c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices")
    )
    same = "the same text" if stream_text == text else repr(stream_text[:40])
    return f"{answer['usage']['completion_tokens']} tokens, {text[:40]!r}; stream: {same}"


def _time_one(client: httpx.Client, body: str) -> float:
    """Milliseconds from sending `body` to the reply's last byte (a stream's `[DONE]`). Raises
    httpx.HTTPError (on a status other than 200 too)."""
    started = time.perf_counter()
    with client.stream("POST", CHAT_PATH, content=body) as reply:
        reply.raise_for_status()
        for _ in reply.iter_bytes():
            pass
    return (time.perf_counter() - started) * 1000


def parse(argv: Sequence[str]) -> tuple[VllmOptions, argparse.Namespace]:
    defaults = VllmOptions()
    parser = argparse.ArgumentParser(prog="bench/gateway.py --vllm", description=__doc__)
    add = parser.add_argument
    add("--duration-s", type=float, default=defaults.duration_s, help="each run")
    add("--rounds", type=int, default=defaults.rounds, help="passes over every row and setup")
    add("--connections", type=int, default=defaults.connections, help="closed-loop connections")
    add("--rate", type=int, default=defaults.rate_per_s, help="the paced load's req/s")
    add("--paced-connections", type=int, default=defaults.paced_connections)
    add(
        "--one-by-one",
        type=int,
        default=defaults.one_by_one,
        metavar="N",
        help="requests per setup and mode, one at a time, at the end (0: none)",
    )
    add("--json", type=Path, default=None, metavar="FILE", help="also write the numbers here")
    args = parser.parse_args(argv)
    if args.duration_s < 1 or args.rounds < 1 or args.connections < 1:
        parser.error("need --duration-s >= 1, --rounds >= 1, --connections >= 1")
    if args.rate < 1 or args.paced_connections < 1:
        parser.error("need --rate >= 1 and --paced-connections >= 1")
    options = VllmOptions(
        duration_s=args.duration_s,
        rounds=args.rounds,
        connections=args.connections,
        rate_per_s=args.rate,
        paced_connections=args.paced_connections,
        one_by_one=max(0, args.one_by_one),
    )
    return options, args


def main(argv: Sequence[str]) -> int:
    options, args = parse(argv)
    console = Console() if sys.stdout.isatty() else Console(width=220)
    status = Console(stderr=True) if sys.stderr.isatty() else Console(stderr=True, width=220)
    why_not = missing() or cannot_run_gateway()
    if why_not is None and find_tool("wrk") is None:
        why_not = "no wrk: apt-get install wrk"
    if why_not:
        status.print(f"cannot run: {escape(why_not)}")
        return 1
    m = machine()
    load_average = " ".join(f"{n:.2f}" for n in os.getloadavg())
    results = VllmResults(
        options, f"{m.cpu}, {m.cores} cores · {m.python} · {m.platform}", load_average
    )
    started = time.monotonic()
    try:
        with Processes() as procs:
            VllmBench(options, results, status).run(procs)
    except KeyboardInterrupt:
        status.print("interrupted: every process this benchmark started is stopped")
        return 130
    except RuntimeError as error:
        status.print(f"[red]could not run:[/] {escape(str(error))}")
        return 1
    results.load_average += " → at end " + " ".join(f"{n:.2f}" for n in os.getloadavg())
    print_results(results, console)
    console.print(f"took {time.monotonic() - started:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(results.as_json(), indent=2) + "\n")
        console.print(f"numbers written to {args.json}")
    return 0
