"""Data for pretraining: text sources (Hub or local files, through `datasets`), byte-level BPE tokenizers
(`tokenizers`), causal-LM packing and BabyBERTa-style masking, and resumable batch streams.

The names load on first use: the config classes (`DataConfig`, `TokenizerConfig`, `TextSource`) import no torch,
so that the command line can build its options from them at once.
"""

from __future__ import annotations

from ..lazy import lazy_exports

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


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = sorted(_EXPORTS)
