"""A byte-level BPE tokenizer trained by the pipeline on its own corpora.

No pretrained tokenizer can be downloaded here, so the tiny models use one trained on
the tiny datasets' prompts and demonstrations, saved as a ``PreTrainedTokenizerFast``
with a Qwen-style chat template so every later stage loads it like a real one.
The think/answer tags are single added tokens but not "special", so decoding with
``skip_special_tokens=True`` keeps them for the rewards' answer extraction.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

__all__ = ["CHAT_TEMPLATE", "TAG_TOKENS", "train_tokenizer"]

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TAG_TOKENS = ["<think>", "</think>", "<answer>", "</answer>"]
QWEN2_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def train_tokenizer(texts: Iterable[str], vocab_size: int, out_dir: str | os.PathLike[str]) -> Path:
    """Train, wrap and save; returns the directory (``tokenizer.json``, ``tokenizer_config.json``...)."""
    os.environ.setdefault("RAYON_NUM_THREADS", "1")  # one thread: merges come out identical run to run
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    # Qwen2's pre-tokenizer: transformers rebuilds a Qwen2 model directory's tokenizer with it, so a tokenizer
    # trained with anything else would tokenize differently once saved next to the model.
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(texts, trainer)
    tokenizer.add_tokens([AddedToken(tag, special=False, normalized=False) for tag in TAG_TOKENS])
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token=None, unk_token=None)
    fast.chat_template = CHAT_TEMPLATE
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(out_dir)
    return out_dir
