"""Data for pretraining: text sources (Hub or local files, through `datasets`), byte-level BPE tokenizers
(`tokenizers`), causal-LM packing and BabyBERTa-style masking, and resumable batch streams.

The names load on first use: the config classes (`DataConfig`, `TokenizerConfig`, `TextSource`) import no torch,
so that the command line can build its options from them at once.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    **dict.fromkeys(["DataConfig", "TASKS", "check_replace_probs"], "config"),
    **dict.fromkeys(["Corpus", "MapBatchStream", "MaskedCollator", "StreamBatchStream", "batch_generator",
                     "build_corpus", "collate_causal", "iter_text_column", "mask_tokens", "pack_documents",
                     "split_validation"], "corpus"),
    **dict.fromkeys(["TextSource", "default_data_dir", "expand_path", "iter_texts", "load_texts", "resolve_files"],
                    "sources"),
    **dict.fromkeys(["TokenizerConfig", "load_pretrained_tokenizer", "special_token_ids", "train_bpe_tokenizer"],
                    "tokenizer"),
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = sorted(_EXPORTS)
