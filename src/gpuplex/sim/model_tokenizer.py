"""The simulated model's own tokenizer: a byte-level BPE, as real chat models use, so the simulated
server counts prompt and completion tokens the way a model server does (by its tokenizer, chat
template included) and never by the gateway's estimate, which it is there to check.

The tokenizer is trained at start-up, deterministically, on a fixed corpus: a few modules of the
running Python's standard library (about 0.5 MB; the same files give the same vocabulary, so two
servers on one interpreter count alike). Training takes about 0.4-0.6 s on one core and happens once
per process (`sim_tokenizer()` is cached); a server calls it before it answers its first request.

Generated text is made of real tokens: `words` are whole-word tokens (a leading space and letters)
that the tokenizer reads back as exactly one token each, so a reply of k such tokens is counted as k
by this tokenizer, however it is split into stream chunks."""

from __future__ import annotations

import re
import sysconfig
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tokenizers import Tokenizer

VOCAB_SIZE = 4096
BOS = "<s>"
EOS = "</s>"
PAD = "<pad>"
#: Chat turn markers of the simulated model's chat template (model_chat.py).
ROLE_TOKENS = {
    "system": "<|system|>",
    "user": "<|user|>",
    "assistant": "<|assistant|>",
    "tool": "<|tool|>",
}
END_OF_TURN = "<|end|>"
SPECIAL_TOKENS = (BOS, EOS, PAD, *ROLE_TOKENS.values(), END_OF_TURN)
#: The training corpus, relative to the standard library: plain-text-heavy modules present in every
#: Python the project supports.
CORPUS = (
    "argparse.py",
    "calendar.py",
    "dataclasses.py",
    "enum.py",
    "functools.py",
    "json/decoder.py",
    "json/encoder.py",
    "string.py",
    "textwrap.py",
    "typing.py",
)
#: Whole-word tokens generated text is made of (the first this many that qualify, by id).
WORDS = 64
_WORD = re.compile(r"Ġ[a-z]{3,}")


class SimTokenizer:
    """Encode, decode and count with the simulated model's BPE."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        self.vocab_size: int = tokenizer.get_vocab_size()
        self.bos_id = self._id(BOS)
        self.eos_id = self._id(EOS)
        self._pieces: dict[int, str] = {}
        self.words: tuple[int, ...] = self._whole_words()

    def _id(self, token: str) -> int:
        found = self._tokenizer.token_to_id(token)
        if found is None:
            raise LookupError(f"the simulated tokenizer has no {token!r}")
        return found

    def encode(self, text: str, *, add_bos: bool = False) -> list[int]:
        """Token ids of `text`; special tokens written in it (`<|user|>`) are read as special
        tokens, as a Hugging Face tokenizer reads a rendered chat template."""
        ids: list[int] = self._tokenizer.encode(text, add_special_tokens=False).ids
        return [self.bos_id, *ids] if add_bos else ids

    def count(self, text: str, *, add_bos: bool = False) -> int:
        return len(self.encode(text, add_bos=add_bos))

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        return self._tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def piece(self, token_id: int) -> str:
        """The text of one token (cached: generated text repeats a few tokens)."""
        text = self._pieces.get(token_id)
        if text is None:
            text = self._pieces[token_id] = self.decode([token_id])
        return text

    def token_strs(self, ids: Sequence[int]) -> list[str]:
        """The vocabulary entries of `ids` (byte-level form, as `/tokenize` reports them)."""
        return [self._tokenizer.id_to_token(i) or "" for i in ids]

    def _whole_words(self) -> tuple[int, ...]:
        vocab = self._tokenizer.get_vocab()
        words: list[int] = []
        for token, token_id in sorted(vocab.items(), key=lambda item: item[1]):
            if _WORD.fullmatch(token) and self.encode(self.decode([token_id])) == [token_id]:
                words.append(token_id)
                if len(words) == WORDS:
                    break
        if not words:
            raise LookupError("the simulated tokenizer learned no whole-word tokens")
        return tuple(words)


def corpus_texts(stdlib: Path | None = None) -> list[str]:
    root = stdlib or Path(sysconfig.get_paths()["stdlib"])
    return [(root / name).read_text(encoding="utf-8") for name in CORPUS]


def train(texts: Sequence[str], vocab_size: int = VOCAB_SIZE) -> SimTokenizer:
    """A byte-level BPE trained on `texts` (deterministic: the same texts, the same tokenizer)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    return SimTokenizer(tokenizer)


@cache
def sim_tokenizer() -> SimTokenizer:
    """The simulated model's tokenizer, trained on first use and kept for the process."""
    return train(corpus_texts())
