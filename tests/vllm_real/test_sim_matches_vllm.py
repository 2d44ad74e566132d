"""`gpuplex sim model` answers as a real vLLM does: the same requests go to the simulated server and to
vLLM 0.32 on CPU (tests/vllm_real/fixtures.py), and each pair of answers must have the same shape,
not the same values: the status, the JSON keys all the way down and the type of each value, the
object names, the number and numbering of choices, the sequence of stream events (role chunks,
token chunks, finish reasons, the usage chunk, `[DONE]`) and whether usage is there at all.

Usage is checked for what it means, on each server by its own lights: `prompt_tokens` is what that
server's `/tokenize` counts for the same prompt (chat template included), `completion_tokens` is
what was generated (every request asks for `ignore_eos`, a vLLM field the simulated server ignores
as vLLM ignores fields it does not know, so the real model always runs to `max_tokens`), and
`total_tokens` is their sum. The two tokenizers differ, so the counts do too."""

from __future__ import annotations

import json
import signal
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest

from tests.integration.sim.servers import start_cli
from tests.vllm_real.server import VllmServer

pytestmark = pytest.mark.xdist_group("vllm")

LORA = "lora-a"
MAX_TOKENS = 6
USER = [{"role": "user", "content": "Say hello to the differential test."}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "weather",
            "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


@dataclass(frozen=True)
class Case:
    """One request of the corpus. `model` None: the server's base model; `n_prompts`: how many
    prompts the request's `prompt` holds."""

    name: str
    path: str
    body: dict[str, object]
    model: str | None = None
    stream: bool = False
    n_prompts: int = 1


def _gen(**body: object) -> dict[str, object]:
    return {"max_tokens": MAX_TOKENS, "ignore_eos": True, **body}


USAGE = {"include_usage": True}
CASES = [
    Case("chat", CHAT, _gen(messages=USER)),
    Case("chat n=2", CHAT, _gen(messages=USER, n=2)),
    Case("chat on a LoRA adapter", CHAT, _gen(messages=USER), model=LORA),
    Case(
        "chat max_completion_tokens",
        CHAT,
        {"messages": USER, "max_completion_tokens": 3, "ignore_eos": True},
    ),
    Case("chat with an unknown field", CHAT, _gen(messages=USER, frobnicate={"x": [1]})),
    Case(
        "chat with tools, tool_choice none",
        CHAT,
        _gen(messages=USER, tools=TOOLS, tool_choice="none"),
    ),
    Case("chat stream", CHAT, _gen(messages=USER, stream=True), stream=True),
    Case(
        "chat stream with usage",
        CHAT,
        _gen(messages=USER, stream=True, stream_options=USAGE),
        stream=True,
    ),
    Case(
        "chat stream n=2 with continuous usage",
        CHAT,
        _gen(
            messages=USER,
            n=2,
            stream=True,
            stream_options={"include_usage": True, "continuous_usage_stats": True},
        ),
        stream=True,
    ),
    Case("completion of a string", COMPLETIONS, _gen(prompt="Once upon a time")),
    Case(
        "completion of strings, n=2",
        COMPLETIONS,
        _gen(prompt=["One", "Two three"], n=2),
        n_prompts=2,
    ),
    Case("completion of token ids", COMPLETIONS, _gen(prompt=[11, 12, 13, 14])),
    Case(
        "completion of token-id arrays",
        COMPLETIONS,
        _gen(prompt=[[11, 12], [13, 14, 15]]),
        n_prompts=2,
    ),
    Case("completion stream", COMPLETIONS, _gen(prompt="Once upon", stream=True), stream=True),
    Case(
        "completion stream of strings with usage",
        COMPLETIONS,
        _gen(prompt=["One", "Two three"], stream=True, stream_options=USAGE),
        stream=True,
        n_prompts=2,
    ),
    Case("unknown model", CHAT, _gen(messages=USER), model="no-such-model"),
    Case("max_tokens over the context", CHAT, {"messages": USER, "max_tokens": 100_000}),
    Case(
        "completion max_tokens over the context",
        COMPLETIONS,
        {"prompt": "x", "max_tokens": 100_000},
    ),
    Case("max_tokens zero", CHAT, {"messages": USER, "max_tokens": 0}),
    Case("stream options without a stream", CHAT, _gen(messages=USER, stream_options=USAGE)),
    Case("max_tokens not a number", CHAT, {"messages": USER, "max_tokens": "many"}),
    Case("messages not a list", CHAT, {"messages": {"role": "user"}}),
    Case("no messages", CHAT, _gen(messages=[])),
    Case("completion without a prompt", COMPLETIONS, {"max_tokens": 4}),
    Case("n zero", CHAT, _gen(messages=USER, n=0)),
    Case("empty tools", CHAT, _gen(messages=USER, tools=[])),
    Case("embeddings", "/v1/embeddings", {"input": ["one", "two"]}),
]
#: Forced tool calls: vLLM answers them only with a tool parser (`--enable-auto-tool-choice
#: --tool-call-parser ...`), and its random-weight model writes arguments that are no JSON, so both
#: servers are cut at `max_tokens` (`length`) and compared where the shapes do not depend on what
#: the model wrote: a named function, its arguments streamed piece by piece. The session's vLLM has
#: a tool parser (tests/vllm_real/fixtures.py).
NAMED = {"type": "function", "function": {"name": "weather"}}
OPTIONAL = [
    Case(
        "named tool call", CHAT, _gen(messages=USER, tools=TOOLS, tool_choice=NAMED, max_tokens=3)
    ),
    Case(
        "streamed named tool call",
        CHAT,
        _gen(
            messages=USER,
            tools=TOOLS,
            tool_choice=NAMED,
            max_tokens=3,
            stream=True,
            stream_options=USAGE,
        ),
        stream=True,
    ),
]


@dataclass
class Answer:
    status: int
    body: object = None  # a whole reply's JSON
    events: list[object] = field(default_factory=list)  # a stream's chunks, then "[DONE]"


@dataclass
class Target:
    """One server under test: its address and its base model's name."""

    url: str
    base: str
    client: httpx.Client

    def model(self, case: Case) -> str:
        return case.model or self.base

    def ask(self, case: Case) -> Answer:
        body = {"model": self.model(case), **case.body}
        if not case.stream:
            reply = self.client.post(f"{self.url}{case.path}", json=body)
            return Answer(reply.status_code, reply.json())
        with self.client.stream("POST", f"{self.url}{case.path}", json=body) as reply:
            raw = reply.read()
        if reply.status_code != 200:
            return Answer(reply.status_code, json.loads(raw))
        events: list[object] = []
        for event in raw.decode().split("\n\n"):
            if not event.strip():
                continue
            assert event.startswith("data: "), event
            data = event.removeprefix("data: ")
            events.append(data if data == "[DONE]" else json.loads(data))
        return Answer(200, events=events)

    def prompt_tokens(self, case: Case) -> int:
        """What this server's own /tokenize counts for the case's prompt(s)."""
        if "messages" in case.body:
            asked = {"model": self.model(case), "messages": case.body["messages"]}
            if "tools" in case.body:
                asked["tools"] = case.body["tools"]
            return self._count(asked)
        prompt = case.body.get("prompt", case.body.get("input"))
        items = prompt if isinstance(prompt, list) else [prompt]
        if all(isinstance(i, int) for i in items):
            return len(items)
        return sum(
            len(i) if isinstance(i, list) else self._count({"model": self.model(case), "prompt": i})
            for i in items
        )

    def _count(self, body: dict[str, object]) -> int:
        reply = self.client.post(f"{self.url}/tokenize", json=body)
        assert reply.status_code == 200, reply.text
        counted = reply.json()
        assert counted["count"] == len(counted["tokens"])
        return int(counted["count"])


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=120) as made:
        yield made


@pytest.fixture(scope="module")
def real(vllm: VllmServer, client: httpx.Client) -> Target:
    return Target(vllm.url, vllm.served_name, client)


@pytest.fixture(scope="module")
def sim(
    real: Target, vllm: VllmServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Target]:
    """The simulated server, serving what the real one serves, with its context length; where the
    real model has no embeddings route, the simulated one is told its models do not embed."""
    cards = real.client.get(f"{real.url}/v1/models").json()["data"]
    max_model_len = next(c["max_model_len"] for c in cards if c["id"] == vllm.served_name)
    args = ["--model", vllm.served_name, "--max-model-len", str(max_model_len)]
    args += [arg for name in vllm.loras for arg in ("--adapter", name)]
    probe = real.client.post(
        f"{real.url}/v1/embeddings", json={"model": vllm.served_name, "input": "x"}
    )
    if probe.status_code == 404 and probe.json() == {"detail": "Not Found"}:
        args += ["--embedding-model", "sim-embedder"]
    log = tmp_path_factory.mktemp("sim-vs-vllm") / "sim.log"
    process, url = start_cli(log, *args)
    try:
        yield Target(url, vllm.served_name, real.client)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(10)


def shape(value: object) -> object:
    """A JSON value with every leaf replaced by its type, and every list by the set of its items'
    shapes (lengths are compared where they mean something, below)."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in sorted(value.items())}
    if isinstance(value, list):
        return ["list", *sorted({dumps_shape(item) for item in value})]
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


def dumps_shape(value: object) -> str:
    """`shape(value)` as JSON with sorted keys: a value that can go in a set."""
    return json.dumps(shape(value), sort_keys=True)


def facts(body: object) -> dict[str, object]:
    """The values that must be the same on both servers: names and numbering, not content."""
    if not isinstance(body, dict):
        return {}
    found: dict[str, object] = {key: body[key] for key in ("object", "detail") if key in body}
    error = body.get("error")
    if isinstance(error, dict):
        found["error"] = {key: error.get(key) for key in ("type", "param", "code")}
    choices = body.get("choices")
    if isinstance(choices, list):
        found["indices"] = [c.get("index") for c in choices]
        found["finish"] = [c.get("finish_reason") for c in choices]
        found["roles"] = [c.get("message", {}).get("role") for c in choices]
    data = body.get("data")
    if isinstance(data, list):
        found["data"] = [(d.get("index"), d.get("object")) for d in data]
    found["has_usage"] = "usage" in body
    return found


def kind(chunk: object) -> str:
    """What a stream event is: role, token, finish, usage or done."""
    if chunk == "[DONE]":
        return "done"
    assert isinstance(chunk, dict), chunk
    choices = chunk["choices"]
    if not choices:
        return "usage"
    (choice,) = choices  # vLLM sends one choice per chunk
    if choice.get("finish_reason") is not None:
        return "finish"
    return "role" if "role" in choice.get("delta", {}) else "token"


def stream_facts(events: list[object]) -> tuple[dict[str, object], dict[str, set[str]]]:
    """The facts of a stream that must match, and the shapes of its events by kind."""
    kinds = [kind(e) for e in events]
    by_kind: dict[str, set[str]] = {}
    for event, what in zip(events, kinds, strict=True):
        by_kind.setdefault(what, set()).add(dumps_shape(event))
    chunks = [e for e in events if isinstance(e, dict) and e["choices"]]
    return {
        "order": _runs([k for k in kinds if k not in ("token", "finish")]),  # role*, usage?, done
        "finishes": Counter(
            (c["choices"][0]["index"], c["choices"][0]["finish_reason"])
            for c in chunks
            if kind(c) == "finish"
        ),
        "roles": sorted(c["choices"][0]["index"] for c in chunks if kind(c) == "role"),
        "token_choices": sorted({c["choices"][0]["index"] for c in chunks if kind(c) != "role"}),
        "objects": sorted({e["object"] for e in events if isinstance(e, dict)}),
        # which kinds of event carry usage (how many token events there are depends on how
        # fast the client reads: vLLM merges the tokens of a slow reader into fewer events)
        "with_usage": sorted(
            {k for k, e in zip(kinds, events, strict=True) if isinstance(e, dict) and "usage" in e}
        ),
    }, by_kind


def finishes_alike(theirs: list[object], ours: list[object]) -> bool:
    """The finish chunks have the same shapes, where vLLM's may also have an empty delta: when a
    choice's last token adds no text (a piece of a multi-byte character), vLLM's chat serving
    sends its finish reason with `DeltaMessage()` (chat_completion/serving.py, "if delta_message
    is None"). Whether it does depends on the token sampled, so either form of each of our finish
    chunks may be the one vLLM sent; every other field must still match."""

    def forms(events: list[object]) -> set[tuple[str, str]]:
        """Each finish chunk's shape as sent, and with its delta emptied."""
        found = set()
        for event in events:
            if isinstance(event, dict) and event["choices"] and kind(event) == "finish":
                choice = event["choices"][0]
                emptied = (
                    {**event, "choices": [{**choice, "delta": {}}]} if "delta" in choice else event
                )
                found.add((dumps_shape(event), dumps_shape(emptied)))
        return found

    theirs_found = {as_sent for as_sent, _ in forms(theirs)}
    ours_found = forms(ours)
    each_of_ours_seen = all(theirs_found & set(pair) for pair in ours_found)
    each_of_theirs_made = all(any(t in pair for pair in ours_found) for t in theirs_found)
    return each_of_ours_seen and each_of_theirs_made


def _tokens(events: list[object]) -> int:
    """How many token events a stream has."""
    return sum(1 for event in events if kind(event) == "token")


def _runs(kinds: list[str]) -> list[str]:
    return [k for i, k in enumerate(kinds) if i == 0 or kinds[i - 1] != k]


def check_usage(target: Target, case: Case, usage: object, choices: int) -> None:
    """prompt_tokens is the server's own count, completion_tokens what was generated."""
    assert isinstance(usage, dict), usage
    prompt = target.prompt_tokens(case)
    body = case.body
    if "input" in body:
        assert usage["prompt_tokens"] == usage["total_tokens"] == prompt
        return
    limit = body.get("max_completion_tokens") or body.get("max_tokens")
    assert isinstance(limit, int)
    assert usage["prompt_tokens"] == prompt, target.url
    assert usage["completion_tokens"] == limit * choices, target.url
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def compare(case: Case, real: Target, sim: Target) -> None:
    theirs, ours = real.ask(case), sim.ask(case)
    assert ours.status == theirs.status, (theirs.body, ours.body)
    n = case.body.get("n", 1)
    assert isinstance(n, int)
    choices = n * case.n_prompts
    if not case.stream or theirs.status != 200:
        assert facts(ours.body) == facts(theirs.body), (theirs.body, ours.body)
        assert shape(ours.body) == shape(theirs.body), (theirs.body, ours.body)
        if theirs.status == 200:
            for target, answer in ((real, theirs), (sim, ours)):
                assert isinstance(answer.body, dict)
                if "choices" in answer.body:
                    assert len(answer.body["choices"]) == choices
                check_usage(target, case, answer.body["usage"], choices)
        return
    (expected, their_shapes), (got, our_shapes) = (
        stream_facts(theirs.events),
        stream_facts(ours.events),
    )
    assert got == expected, (theirs.events, ours.events)
    for what, shapes in their_shapes.items():
        if what == "finish":
            assert finishes_alike(theirs.events, ours.events), (theirs.events, ours.events)
            continue
        if what == "token" and _tokens(theirs.events) < _tokens(ours.events):
            # vLLM merged a slow reader's tokens into fewer events, so it may not have sent every
            # shape of ours (a named tool call's later argument pieces): what it sent, we send
            assert shapes <= our_shapes.get(what, set()), (what, theirs.events, ours.events)
            continue
        assert our_shapes.get(what) == shapes, (what, theirs.events, ours.events)
    # vLLM may merge a slow reader's tokens into its finish event, leaving no token event at all
    assert set(our_shapes) - set(their_shapes) <= {"token"}
    for target, answer in ((real, theirs), (sim, ours)):
        usage_chunks = [e for e in answer.events if isinstance(e, dict) and not e["choices"]]
        if usage_chunks:
            check_usage(target, case, usage_chunks[-1]["usage"], choices)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_simulated_server_answers_as_vllm_does(case: Case, real: Target, sim: Target) -> None:
    compare(case, real, sim)


@pytest.mark.parametrize("case", OPTIONAL, ids=[c.name for c in OPTIONAL])
def test_tool_calls_answer_as_vllm_with_a_tool_parser_does(
    case: Case, real: Target, sim: Target
) -> None:
    answer = real.ask(case)
    error = answer.body.get("error", {}) if isinstance(answer.body, dict) else {}
    assert answer.status == 200, f"the session's vLLM runs with a tool parser: {error}"
    compare(case, real, sim)


def test_the_model_lists_and_tokenize_answers_have_the_same_shape(
    real: Target, sim: Target, vllm: VllmServer
) -> None:
    listed = {}
    for target in (real, sim):
        cards = {c["id"]: c for c in target.client.get(f"{target.url}/v1/models").json()["data"]}
        listed[target.url] = cards
        assert {vllm.served_name, *vllm.loras} <= set(cards)
    theirs, ours = listed[real.url], listed[sim.url]
    for name in (vllm.served_name, LORA):
        assert shape(ours[name]) == shape(theirs[name])
        assert ours[name]["parent"] == theirs[name]["parent"]
    body = {"model": vllm.served_name, "prompt": "hello", "return_token_strs": True}
    answers = [t.client.post(f"{t.url}/tokenize", json=body) for t in (real, sim)]
    assert [a.status_code for a in answers] == [200, 200]
    assert shape(answers[1].json()) == shape(answers[0].json())
