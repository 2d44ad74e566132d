"""vLLM's `/tokenize` and `/detokenize` on the simulated model: what its tokenizer makes of a prompt
or a chat (rendered with its chat template), so a test can count a request's prompt tokens the way
this server counts them, through the same API it would ask a real vLLM.

    POST /tokenize    {"model"?, "prompt", "add_special_tokens"?: true}
                      {"model"?, "messages", "tools"?, "add_generation_prompt"?: true,
                       "continue_final_message"?, "add_special_tokens"?: false}
                      -> {"count", "max_model_len", "tokens", "token_strs"}
    POST /detokenize  {"model"?, "tokens"} -> {"prompt"}
Pure."""

from __future__ import annotations

import orjson

from gpuplex.sim.model_chat import ChatRefused, render_request
from gpuplex.sim.model_errors import ModelErrorReply, invalid, refused
from gpuplex.sim.model_requests import ServedModels
from gpuplex.sim.model_tokenizer import SimTokenizer


def tokenize_reply(
    body: object, served: ServedModels, tokenizer: SimTokenizer
) -> bytes | ModelErrorReply:
    if not isinstance(body, dict):
        return invalid(None, "Input should be a valid dictionary")
    model = served.check(body.get("model"), None)
    if isinstance(model, ModelErrorReply):
        return model
    messages = body.get("messages")
    prompt = body.get("prompt")
    if isinstance(messages, list):
        try:
            text = render_request(body, messages)
        except ChatRefused as error:
            return refused(str(error), error.param)
        tokens = tokenizer.encode(text, add_bos=body.get("add_special_tokens") is True)
    elif isinstance(prompt, str):
        tokens = tokenizer.encode(prompt, add_bos=body.get("add_special_tokens", True) is True)
    else:
        return invalid("prompt", "Field required: `prompt` (a string) or `messages`")
    strs = tokenizer.token_strs(tokens) if body.get("return_token_strs") is True else None
    reply = {
        "count": len(tokens),
        "max_model_len": served.max_model_len,
        "tokens": tokens,
        "token_strs": strs,
    }
    return orjson.dumps(reply)


def detokenize_reply(
    body: object, served: ServedModels, tokenizer: SimTokenizer
) -> bytes | ModelErrorReply:
    if not isinstance(body, dict):
        return invalid(None, "Input should be a valid dictionary")
    model = served.check(body.get("model"), None)
    if isinstance(model, ModelErrorReply):
        return model
    tokens = body.get("tokens")
    if not isinstance(tokens, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) and 0 <= t < tokenizer.vocab_size
        for t in tokens
    ):
        return invalid("tokens", "a list of token ids of this model is required")
    return orjson.dumps({"prompt": tokenizer.decode(tokens)})
