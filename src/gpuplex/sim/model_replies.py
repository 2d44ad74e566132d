"""The simulated model server's whole replies, in vLLM 0.32's shapes (every field vLLM writes, null
where it has nothing to say): chat and text completions, embeddings, the model list, and what each
choice generates.

Generated text is made of real tokens of the simulated tokenizer (model_tokenizer.py): whole-word
tokens for text, the JSON arguments' own tokens for a tool call, so the reply's `usage` is what the
tokenizer counts in it. A reasoning model's choices give their first half to `reasoning`, the rest to
`content`. Choices of a list of prompts are numbered across prompts: prompt p's choice c is
`p * n + c`, as vLLM numbers them. Pure: ids, the time and the tokenizer come in as arguments."""

from __future__ import annotations

import base64
import hashlib
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from gpuplex.core.serve.inference import Endpoint
from gpuplex.sim.model_requests import GenerationRequest
from gpuplex.sim.model_tokenizer import SimTokenizer

DONE_EVENT = b"data: [DONE]\n\n"
OWNED_BY = "gpuplex-sim"
SYSTEM_FINGERPRINT = "gpuplex-sim"
_ID_PREFIX = {Endpoint.CHAT: "chatcmpl", Endpoint.COMPLETIONS: "cmpl", Endpoint.EMBEDDINGS: "embd"}


def reply_id(endpoint: Endpoint, suffix: str) -> str:
    """An OpenAI-looking id: `chatcmpl-...`, `cmpl-...` or `embd-...`."""
    return f"{_ID_PREFIX[endpoint]}-{suffix}"


def tool_call_id(suffix: str, index: int) -> str:
    return f"chatcmpl-tool-{suffix}{index:x}"


@dataclass(frozen=True, slots=True)
class ChoiceOutput:
    """What one choice generates: its tokens' texts, the first `reasoning` of them reasoning."""

    index: int  # across prompts: prompt * n + choice
    prompt: int
    pieces: tuple[str, ...]
    reasoning: int = 0

    @property
    def reasoning_text(self) -> str:
        return "".join(self.pieces[: self.reasoning])

    @property
    def text(self) -> str:
        return "".join(self.pieces[self.reasoning :])


def choice_outputs(request: GenerationRequest, tokenizer: SimTokenizer) -> list[ChoiceOutput]:
    """Every choice of every prompt, in index order."""
    outputs: list[ChoiceOutput] = []
    words = tokenizer.words
    for p, run in enumerate(request.prompts):
        for c in range(request.choices):
            index = p * request.choices + c
            length = run.completion_tokens
            if request.tool_call is not None:
                ids: Sequence[int] = request.tool_call.arguments[:length]
            else:
                ids = [words[(index + i) % len(words)] for i in range(length)]
            reasoning = (length + 1) // 2 if request.reasoning else 0
            outputs.append(
                ChoiceOutput(index, p, tuple(tokenizer.piece(i) for i in ids), reasoning)
            )
    return outputs


def reasoning_tokens(request: GenerationRequest) -> int:
    return sum((p.completion_tokens + 1) // 2 for p in request.prompts) * request.choices


def usage(request: GenerationRequest) -> dict[str, object]:
    """The whole request's usage as vLLM writes it in a whole reply."""
    completion = 0 if request.endpoint is Endpoint.EMBEDDINGS else request.generated_tokens
    details = {"reasoning_tokens": reasoning_tokens(request)} if request.reasoning else None
    return {
        "prompt_tokens": request.prompt_tokens,
        "total_tokens": request.prompt_tokens + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": None,
        "completion_tokens_details": details,
    }


def completion_reply(
    request: GenerationRequest, tokenizer: SimTokenizer, suffix: str, created_s: int
) -> bytes:
    """The whole (non-streaming) reply to a chat or text completion request."""
    chat = request.endpoint is Endpoint.CHAT
    choices = [
        (_chat_choice if chat else _text_choice)(request, output, suffix)
        for output in choice_outputs(request, tokenizer)
    ]
    body: dict[str, object] = {
        "id": reply_id(request.endpoint, suffix),
        "object": "chat.completion" if chat else "text_completion",
        "created": created_s,
        "model": request.model,
        "choices": choices,
        "service_tier": None,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "usage": usage(request),
    }
    if chat:
        body |= {"prompt_logprobs": None, "prompt_token_ids": None, "prompt_text": None}
    body |= {"kv_transfer_params": None, "ec_transfer_params": None, "metrics": None}
    return orjson.dumps(body)


def _chat_choice(
    request: GenerationRequest, output: ChoiceOutput, suffix: str
) -> dict[str, object]:
    message: dict[str, object] = {
        "role": "assistant",
        "content": output.text,
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
        "reasoning": output.reasoning_text if request.reasoning else None,
    }
    call = request.tool_call
    if call is not None:
        function = {"name": call.name, "arguments": output.text}
        message["content"] = ""
        message["tool_calls"] = [
            {"id": tool_call_id(suffix, output.index), "type": "function", "function": function}
        ]
    elif request.reasoning and not output.text:
        message["content"] = None
    return {
        "index": output.index,
        "message": message,
        "logprobs": None,
        "finish_reason": request.prompts[output.prompt].finish_reason.value,
        "stop_reason": None,
        "token_ids": None,
        "routed_experts": None,
    }


def _text_choice(
    request: GenerationRequest, output: ChoiceOutput, suffix: str
) -> dict[str, object]:
    return {
        "index": output.index,
        "text": output.text,
        "logprobs": None,
        "finish_reason": request.prompts[output.prompt].finish_reason.value,
        "stop_reason": None,
        "token_ids": None,
        "prompt_logprobs": None,
        "prompt_token_ids": None,
        "routed_experts": None,
    }


def embedding_vector(text: str, dimensions: int) -> list[float]:
    """A unit vector that depends only on `text` and `dimensions`."""
    digest = hashlib.shake_256(text.encode()).digest(4 * dimensions)
    raw = [n / 2**31 - 1.0 for n in struct.unpack(f"<{dimensions}I", digest)]
    norm = math.sqrt(sum(x * x for x in raw)) or 1.0
    return [x / norm for x in raw]


def embeddings_reply(request: GenerationRequest, suffix: str, created_s: int) -> bytes:
    """The reply to an embeddings request: one vector per input, as floats or base64 float32."""
    data: list[dict[str, object]] = []
    for index, run in enumerate(request.prompts):
        vector = embedding_vector(run.text, request.dimensions)
        encoded: object = vector
        if request.base64:
            encoded = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        data.append({"index": index, "object": "embedding", "embedding": encoded})
    return orjson.dumps(
        {
            "id": reply_id(Endpoint.EMBEDDINGS, suffix),
            "object": "list",
            "created": created_s,
            "model": request.model,
            "data": data,
            "usage": usage(request),
        }
    )


def models_reply(
    models: Sequence[str], adapters: Sequence[str], created_s: int, max_model_len: int
) -> bytes:
    """`GET /v1/models`: the base models, then the LoRA adapters on the first (vLLM's shape)."""
    base = models[0] if models else None
    permission = {
        "id": "modelperm-sim",
        "object": "model_permission",
        "created": created_s,
        "allow_create_engine": False,
        "allow_sampling": True,
        "allow_logprobs": True,
        "allow_search_indices": False,
        "allow_view": True,
        "allow_fine_tuning": False,
        "organization": "*",
        "group": None,
        "is_blocking": False,
    }

    def card(name: str, parent: str | None) -> dict[str, object]:
        return {
            "id": name,
            "object": "model",
            "created": created_s,
            "owned_by": OWNED_BY,
            "root": name,
            "parent": parent,
            "max_model_len": None if parent else max_model_len,
            "permission": [permission],
        }

    cards = [card(m, None) for m in models] + [card(a, base) for a in adapters]
    return orjson.dumps({"object": "list", "data": cards})
