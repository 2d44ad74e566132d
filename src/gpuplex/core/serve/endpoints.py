"""The OpenAI endpoints the gateway serves, and their paths."""

from __future__ import annotations

from enum import StrEnum


class Endpoint(StrEnum):
    CHAT = "chat.completions"
    COMPLETIONS = "completions"
    EMBEDDINGS = "embeddings"


ENDPOINT_PATHS = {
    "/v1/chat/completions": Endpoint.CHAT,
    "/v1/completions": Endpoint.COMPLETIONS,
    "/v1/embeddings": Endpoint.EMBEDDINGS,
}
