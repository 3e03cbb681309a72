"""Data for pretraining: text sources (Hub or local files, through `datasets`), byte-level BPE tokenizers
(`tokenizers`), causal-LM packing and BabyBERTa-style masking, and resumable batch streams."""

from .corpus import (
    Corpus,
    DataConfig,
    MapBatchStream,
    MaskedCollator,
    StreamBatchStream,
    batch_generator,
    build_corpus,
    collate_causal,
    iter_text_column,
    mask_tokens,
    pack_documents,
    split_validation,
)
from .sources import TextSource, default_data_dir, expand_path, iter_texts, load_texts, resolve_files
from .tokenizer import TokenizerConfig, load_pretrained_tokenizer, special_token_ids, train_bpe_tokenizer

__all__ = [
    "Corpus",
    "DataConfig",
    "MapBatchStream",
    "MaskedCollator",
    "StreamBatchStream",
    "TextSource",
    "TokenizerConfig",
    "batch_generator",
    "build_corpus",
    "collate_causal",
    "default_data_dir",
    "expand_path",
    "iter_text_column",
    "iter_texts",
    "load_pretrained_tokenizer",
    "load_texts",
    "mask_tokens",
    "pack_documents",
    "resolve_files",
    "special_token_ids",
    "split_validation",
    "train_bpe_tokenizer",
]
