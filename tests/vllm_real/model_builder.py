"""A tiny model for a real vLLM, made here from nothing: no model hub, no download.

Run with the vLLM venv's Python (tests/vllm_real/install.py), where torch, transformers, tokenizers
and peft live; the project's own venv has none of them. tests/vllm_real/server.py runs it:

    <vllm venv>/bin/python tests/vllm_real/model_builder.py DEST

and it writes, in DEST:
- `base/`: a byte-level BPE tokenizer (vocabulary 4,096) trained on the standard library's own `.py`
  files, with special tokens for BOS, EOS, padding and chat turns and a Jinja chat template, and a
  random-weight `LlamaForCausalLM` (hidden 128, 4 heads of 32: the CPU attention backend refuses a
  head of 16; about 1.4 M parameters);
- `lora-a/`, `lora-b/`: PEFT LoRA adapters (r 8 on q_proj and v_proj) with random `lora_B` (PEFT
  starts it at zero, which would make an adapter a no-op), so that each one's output differs from
  the base's and from the other's.

Everything is seeded and the training text is the sorted list of files, so the same interpreter
makes the same files. It prints one JSON line: what it wrote. About 15 s on 2 cores, most of it
importing torch.
"""

from __future__ import annotations

import json
import sys
import sysconfig
from pathlib import Path

import torch
from peft import LoraConfig, get_peft_model
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

VOCAB_SIZE = 4096
#: Enough text for the merges of a 4,096 vocabulary, read in under a second.
TRAINING_CHARS = 4_000_000
BOS, EOS, PAD, END = "<|bos|>", "<|eos|>", "<|pad|>", "<|end|>"
ROLES = ("system", "user", "assistant", "tool")
SPECIAL_TOKENS = [BOS, EOS, PAD, END, *(f"<|{role}|>" for role in ROLES)]
#: Each message as `<|role|>content<|end|>`, after one BOS; a generation prompt opens the
#: assistant's turn. The model ends its turn with EOS (the config's eos_token_id).
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>{{ message['content'] }}<|end|>"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
LORA_RANK = 8
ADAPTERS = {"lora-a": 1, "lora-b": 2}  # name: seed of its lora_B
SEED = 0


def training_text() -> list[str]:
    """The standard library's `.py` files, in sorted order, up to TRAINING_CHARS characters."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    texts: list[str] = []
    total = 0
    for path in sorted(stdlib.glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        texts.append(text)
        total += len(text)
        if total >= TRAINING_CHARS:
            break
    return texts


def build_tokenizer(dest: Path) -> PreTrainedTokenizerFast:
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(training_text(), trainer)
    bos_id = bpe.token_to_id(BOS)
    # a plain prompt starts with BOS too, as a Llama tokenizer's does; the chat template writes its
    # own, and vLLM tokenizes a rendered chat without adding special tokens
    bpe.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, bos_id)]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        additional_special_tokens=[END, *(f"<|{role}|>" for role in ROLES)],
        model_max_length=512,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(dest)
    return tokenizer


def build_model(dest: Path, tokenizer: PreTrainedTokenizerFast) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=512,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config)
    model.save_pretrained(dest)
    return model


def build_adapter(base: Path, dest: Path, seed: int) -> None:
    model = LlamaForCausalLM.from_pretrained(base)
    config = LoraConfig(
        r=LORA_RANK,
        lora_alpha=2 * LORA_RANK,
        lora_dropout=0.0,
        target_modules=["q_proj", "v_proj"],
        task_type="CAUSAL_LM",
    )
    torch.manual_seed(seed)
    adapted = get_peft_model(model, config)
    with torch.no_grad():
        for name, parameter in adapted.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0.0, 0.5)
    adapted.save_pretrained(dest)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: model_builder.py DEST", file=sys.stderr)  # noqa: T201 - a script's usage
        return 2
    dest = Path(argv[0]).resolve()
    base = dest / "base"
    base.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(base)
    model = build_model(base, tokenizer)
    loras: dict[str, str] = {}
    written = {"base": str(base), "loras": loras, "parameters": model.num_parameters()}
    for name, seed in ADAPTERS.items():
        build_adapter(base, dest / name, seed)
        loras[name] = str(dest / name)
    for path in dest.rglob("*"):  # safetensors come 0600: a replica may run as another user
        path.chmod(0o755 if path.is_dir() else 0o644)
    print(json.dumps(written))  # noqa: T201 - what it wrote, for server.build_model
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
