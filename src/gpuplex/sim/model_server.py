"""A simulated OpenAI-compatible model server that answers as vLLM 0.32 does: chat and text
completions (whole or streamed token by token), embeddings, the model list, `/tokenize`, plus
`/sim/...` endpoints that let tests see what arrived. It counts tokens with a tokenizer of its own
(model_tokenizer.py), never with the gateway's estimate, so tests can catch the estimate being wrong
or gamed. It serves a base model and LoRA adapter names, takes time per token as the latency model
says, and can hold requests beyond a batch size. A raw ASGI app with orjson, cheap per request,
because benchmarks run it as the backend behind both nginx and the gateway.

    GET  /health               200, empty (vLLM's)
    GET  /v1/models            base models, then adapters
    POST /v1/chat/completions  POST /v1/completions  POST /v1/embeddings
    POST /tokenize             POST /detokenize
    GET  /sim/last-request     the last JSON body POSTed to /v1, as it arrived
    GET  /sim/stats            {"requests": {model: count}, "in_flight": n,
                                "prompt_tokens": {model: read}, "generated_tokens": {model: n}}
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, MutableMapping
from contextlib import suppress
from dataclasses import dataclass
from functools import partial
from types import TracebackType
from typing import Any

import orjson

from gpuplex.clock import monotonic_s, now_s
from gpuplex.core.serve.inference import ENDPOINT_PATHS, Endpoint
from gpuplex.ids import random_hex
from gpuplex.sim.model_errors import ModelErrorReply, detail, invalid_json
from gpuplex.sim.model_latency import LatencyModel
from gpuplex.sim.model_replies import completion_reply, embeddings_reply, models_reply
from gpuplex.sim.model_requests import GenerationRequest, ServedModels, parse_request
from gpuplex.sim.model_stream import StreamEvents
from gpuplex.sim.model_tokenize import detokenize_reply, tokenize_reply
from gpuplex.sim.model_tokenizer import SimTokenizer, sim_tokenizer

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Handler = Callable[[Receive, Send], Awaitable[None]]

SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
SHUTTING_DOWN = ModelErrorReply(503, "The simulated server is shutting down: retry elsewhere.")
logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ModelServerSettings:
    """What the simulated server serves and how fast. `models[0]` is the base the adapters sit on."""

    models: tuple[str, ...]
    adapters: tuple[str, ...] = ()
    embedding_models: tuple[str, ...] = ()  # embed only; when set, only they embed
    reasoning_models: tuple[str, ...] = ()  # bases or adapters whose chat replies reason first
    prefill_s_per_token: float = 0.0
    decode_s_per_token: float = 0.0
    contention: float = 0.0  # slowdown = 1 + contention * (in_flight - 1)
    max_concurrency: int | None = None  # requests beyond it wait, as for a full batch
    default_max_tokens: int = 16  # a completion request without max_tokens (vLLM's default)
    max_model_len: int = 4096  # a chat request without a limit generates up to this - prompt
    embedding_dim: int = 8

    @property
    def latency(self) -> LatencyModel:
        return LatencyModel(self.prefill_s_per_token, self.decode_s_per_token, self.contention)

    @property
    def served(self) -> ServedModels:
        return ServedModels(
            bases=self.models,
            adapters=self.adapters,
            embedding=self.embedding_models,
            reasoning=self.reasoning_models,
            max_model_len=self.max_model_len,
            default_max_tokens=self.default_max_tokens,
            embedding_dim=self.embedding_dim,
        )


def make_app(settings: ModelServerSettings) -> ModelServer:
    """The ASGI app of a simulated model server (run it with uvicorn, or any ASGI server). Its
    tokenizer is made here (once per process), before the server answers anything."""
    return ModelServer(settings, sim_tokenizer(), id_prefix=random_hex(12), started_s=int(now_s()))


class ModelServer:
    """The ASGI app. `in_flight`, `requests` and `last_request` are what `/sim/...` reports;
    `stop()` ends the requests in progress at their next token (for a quick, quiet shutdown)."""

    def __init__(
        self,
        settings: ModelServerSettings,
        tokenizer: SimTokenizer,
        *,
        id_prefix: str,
        started_s: int,
    ) -> None:
        self.settings = settings
        self.tokenizer = tokenizer
        self.latency = settings.latency
        self.served = settings.served
        self.in_flight = 0
        self.requests: Counter[str] = Counter()
        #: what the simulated accelerator really did: prompt tokens read, tokens generated
        #: (a request cut short counts only what it generated before it stopped)
        self.prompt_tokens_read: Counter[str] = Counter()
        self.generated_tokens: Counter[str] = Counter()
        self.last_request = b"null"
        self.stopping = False
        #: the simulated accelerator is busy while any request is in flight: seconds of it ended
        #: so far, and when the stretch now going on began (None: idle)
        self._busy_s = 0.0
        self._busy_since_s: float | None = None
        limit = settings.max_concurrency
        self.slots = asyncio.Semaphore(limit) if limit is not None else None
        #: requests wait (latency) or queue (slots): each watches for its client leaving
        self.paced = not self.latency.instant or self.slots is not None
        self._id_prefix = id_prefix
        self._ids = 0
        self._models_body = models_reply(
            settings.models + settings.embedding_models,
            settings.adapters,
            started_s,
            settings.max_model_len,
        )
        self._routes: dict[str, tuple[str, Handler]] = {
            **{
                path: ("POST", partial(self._generate, endpoint))
                for path, endpoint in ENDPOINT_PATHS.items()
            },
            "/tokenize": ("POST", partial(self._tokenize, tokenize_reply)),
            "/detokenize": ("POST", partial(self._tokenize, detokenize_reply)),
            "/v1/models": ("GET", self._models),
            "/health": ("GET", self._health),
            "/sim/last-request": ("GET", self._last_request),
            "/sim/stats": ("GET", self._stats),
        }

    def busy_seconds(self) -> float:
        """Seconds the simulated accelerator has been busy (some request in flight) since the
        server started: what it reports as its GPU utilization. Safe to call from another thread."""
        since_s = self._busy_since_s
        return self._busy_s + (monotonic_s() - since_s if since_s is not None else 0.0)

    def _turn_started(self) -> None:
        self.in_flight += 1
        if self.in_flight == 1:
            self._busy_since_s = monotonic_s()

    def _turn_ended(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0 and self._busy_since_s is not None:
            self._busy_s += monotonic_s() - self._busy_since_s
            self._busy_since_s = None

    def stop(self) -> None:
        """Shutting down: streams in progress end at their next token (without `[DONE]`, so
        clients see them cut short), whole replies not yet sent get 503. Safe in a signal handler."""
        self.stopping = True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        try:
            await self._http(scope, receive, send)
        except Exception:  # a reply, never a traceback, whatever went wrong
            logger.exception(
                "simulated model server failed on %s %s", scope["method"], scope["path"]
            )
            with suppress(Exception):
                await _send_error(send, ModelErrorReply(500, "The simulated server failed."))

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = self._routes.get(scope["path"])
        if route is None:  # FastAPI's answers, as vLLM gives them
            await _send_json(send, 404, detail(404))
            return
        method, handler = route
        if scope["method"] != method:
            await _send_json(send, 405, detail(405), [(b"allow", method.encode())])
            return
        await handler(receive, send)

    async def _generate(self, endpoint: Endpoint, receive: Receive, send: Send) -> None:
        raw = await _read_body(receive)
        if raw is None:
            return  # the client left before sending its request
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            await _send_error(send, invalid_json())
            return
        self.last_request = raw
        request = parse_request(endpoint, body, self.served, self.tokenizer)
        if isinstance(request, ModelErrorReply):
            await _send_error(send, request)
            return
        self.requests[request.model] += 1
        self.prompt_tokens_read[request.model] += request.prompt_tokens
        self._ids += 1
        suffix = f"{self._id_prefix}{self._ids:x}"
        if request.stream:
            await self._stream(request, suffix, receive, send)
        else:
            await self._whole(request, suffix, receive, send)

    async def _whole(
        self, request: GenerationRequest, suffix: str, receive: Receive, send: Send
    ) -> None:
        embedding = request.endpoint is Endpoint.EMBEDDINGS
        if self.paced:
            decoding = not embedding and self.latency.decode_s_per_token > 0
            async with _Turn(self, receive) as turn:
                for step in range(request.steps if decoding else 1):
                    if not await turn.token(step, request.prompt_tokens):
                        if self.stopping:
                            await _send_error(send, SHUTTING_DOWN)
                        return  # else the client has gone: nobody to answer
                    if decoding:
                        self.generated_tokens[request.model] += request.running(step)
            if not decoding:
                self.generated_tokens[request.model] += request.generated_tokens
        else:
            self.generated_tokens[request.model] += request.generated_tokens
        if embedding:
            body = embeddings_reply(request, suffix, int(now_s()))
        else:
            body = completion_reply(request, self.tokenizer, suffix, int(now_s()))
        await _send_json(send, 200, body)

    async def _stream(
        self, request: GenerationRequest, suffix: str, receive: Receive, send: Send
    ) -> None:
        events = StreamEvents(request, self.tokenizer, suffix, int(now_s()))
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        async with _Turn(self, receive) as turn:
            for step in range(request.steps):
                if not await turn.token(step, request.prompt_tokens):
                    await send({"type": "http.response.body", "body": b""})  # cut short
                    return
                chunk = events.step(step)
                if step == 0:
                    chunk = events.head() + chunk
                self.generated_tokens[request.model] += request.running(step)
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": events.end()})

    async def _tokenize(
        self,
        answer: Callable[[object, ServedModels, SimTokenizer], bytes | ModelErrorReply],
        receive: Receive,
        send: Send,
    ) -> None:
        raw = await _read_body(receive)
        if raw is None:
            return
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            await _send_error(send, invalid_json())
            return
        reply = answer(body, self.served, self.tokenizer)
        if isinstance(reply, ModelErrorReply):
            await _send_error(send, reply)
        else:
            await _send_json(send, 200, reply)

    async def _models(self, receive: Receive, send: Send) -> None:
        await _send_json(send, 200, self._models_body)

    async def _health(self, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def _last_request(self, receive: Receive, send: Send) -> None:
        await _send_json(send, 200, self.last_request)

    async def _stats(self, receive: Receive, send: Send) -> None:
        stats = {
            "requests": dict(self.requests),
            "in_flight": self.in_flight,
            "prompt_tokens": dict(self.prompt_tokens_read),
            "generated_tokens": dict(self.generated_tokens),
        }
        await _send_json(send, 200, orjson.dumps(stats))


class _Turn:
    """One request's turn on the simulated accelerator: waits for a batch slot, counts as in
    flight, paces its tokens on a schedule (so timer overshoot does not add up), and notices when
    the client has gone away so that an abandoned request stops, as vLLM aborts it."""

    __slots__ = ("_due", "_loop", "_receive", "_server", "_watcher")

    def __init__(self, server: ModelServer, receive: Receive) -> None:
        self._server = server
        self._receive = receive
        self._loop = asyncio.get_running_loop()
        self._watcher: asyncio.Future[Message] | None = None
        self._due = 0.0

    async def __aenter__(self) -> _Turn:
        server = self._server
        if server.paced:
            self._watcher = asyncio.ensure_future(self._receive())
        if server.slots is not None:
            try:
                await server.slots.acquire()
            except BaseException:
                self._stop_watching()
                raise
        server._turn_started()
        self._due = self._loop.time()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        server = self._server
        server._turn_ended()
        if server.slots is not None:
            server.slots.release()
        self._stop_watching()

    async def token(self, index: int, prompt_tokens: int) -> bool:
        """Wait until token `index` is due; False if the client has gone away meanwhile or the
        server is stopping."""
        delay_s = self._server.latency.token_s(index, prompt_tokens, self._server.in_flight)
        if delay_s > 0:
            self._due += delay_s
            wait_s = self._due - self._loop.time()
            if wait_s > 0:
                await asyncio.sleep(wait_s)
        gone = self._watcher is not None and self._watcher.done()
        return not gone and not self._server.stopping

    def _stop_watching(self) -> None:
        watcher = self._watcher
        if watcher is None:
            return
        if not watcher.done():
            watcher.cancel()
        elif not watcher.cancelled():
            watcher.exception()  # retrieved, so asyncio does not warn about it


async def _read_body(receive: Receive) -> bytes | None:
    """The whole request body, or None if the client disconnected first."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def _send_json(
    send: Send, status: int, body: bytes, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send(
        {"type": "http.response.start", "status": status, "headers": headers + (extra or [])}
    )
    await send({"type": "http.response.body", "body": body})


async def _send_error(send: Send, error: ModelErrorReply) -> None:
    await _send_json(send, error.status, error.body())


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
