"""Tokenizers: train a byte-level BPE on the training corpus with `tokenizers`, or reuse an existing one.

The trained tokenizer is a transformers `PreTrainedTokenizerFast` (saved as `tokenizer.json` +
`tokenizer_config.json`, loadable with `AutoTokenizer.from_pretrained`). Its special tokens follow RoBERTa's ids,
which the model presets assume: `<s>`=0 (bos), `<pad>`=1, `</s>`=2 (eos), `<unk>`=3, and for masked LMs `<mask>`=4
(with `lstrip`, so that "the <mask>" works as in RoBERTa). A masked-LM tokenizer wraps each input as
`<s> ... </s>`; a causal-LM tokenizer adds nothing (documents are packed with `</s>` between them).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from ..regular_files import check_model_folder
from .sources import MAX_DOCUMENT_CHARS, split_long_text

TASKS = ("causal", "masked")
SPECIAL_TOKENS = {"bos_token": "<s>", "pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"}
MASK_TOKEN = "<mask>"


MAX_VOCAB_SIZE = 1 << 20  # a trained vocabulary larger than this is a typo (1e9 made the BPE trainer abort)


@dataclass
class TokenizerConfig:
    """How the tokenizer is obtained.

    pretrained: reuse this tokenizer (Hub name or folder) instead of training one.
    vocab_size: size of the trained byte-level BPE vocabulary (special tokens included).
    min_frequency: merges must occur at least this often.
    add_prefix_space: treat the first word like the others (a leading space); default True for masked LMs (one
        sentence per input), False for causal LMs.
    train_documents: train on at most this many documents of the training split (null: all of them).
    model_max_length: recorded in the tokenizer (default: the block size / max length of the data).
    """

    pretrained: str | None = None
    vocab_size: int = 8192
    min_frequency: int = 2
    add_prefix_space: bool | None = None
    train_documents: int | None = 200_000
    model_max_length: int | None = None

    def validate(self, where: str = "tokenizer") -> None:
        if self.pretrained is None:
            if isinstance(self.vocab_size, bool) or not float(self.vocab_size).is_integer():
                raise ValueError(f"{where}.vocab_size must be a whole number, got {self.vocab_size!r}")
            if self.vocab_size > MAX_VOCAB_SIZE:
                raise ValueError(
                    f"{where}.vocab_size={self.vocab_size:g} is beyond {MAX_VOCAB_SIZE:,} (the largest vocabularies in "
                    f"use have ~262k tokens; the BPE trainer's memory grows with it): give a size up to {MAX_VOCAB_SIZE:,}")
            self.vocab_size = int(self.vocab_size)
            if self.vocab_size < 256 + len(SPECIAL_TOKENS) + 1:
                raise ValueError(
                    f"{where}.vocab_size must be at least {256 + len(SPECIAL_TOKENS) + 1} (the 256 byte symbols and "
                    f"the special tokens), got {self.vocab_size}"
                )
            if self.min_frequency < 1:
                raise ValueError(f"{where}.min_frequency must be >= 1, got {self.min_frequency}")
            if self.train_documents is not None and self.train_documents <= 0:
                raise ValueError(f"{where}.train_documents must be > 0 (or null for all), got {self.train_documents}")


def train_bpe_tokenizer(
    texts: Iterable[str],
    task: str,
    vocab_size: int = 8192,
    min_frequency: int = 2,
    add_prefix_space: bool | None = None,
    model_max_length: int | None = None,
):
    """Train a byte-level BPE on `texts`; returns a `PreTrainedTokenizerFast` with the special tokens above."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    if add_prefix_space is None:
        add_prefix_space = task == "masked"
    specials = [AddedToken(token, normalized=False, special=True) for token in SPECIAL_TOKENS.values()]
    if task == "masked":
        # lstrip: the mask takes the space before it, as RoBERTa's, so "the dog <mask>" has no stray " " token
        specials.append(AddedToken(MASK_TOKEN, lstrip=True, rstrip=False, normalized=False, special=True))
    backend = Tokenizer(models.BPE(unk_token=None))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    count = 0

    def counted():
        nonlocal count
        for text in texts:
            count += 1
            if len(text) > MAX_DOCUMENT_CHARS:  # (local files are split when read; a Hub data set's documents here)
                yield from split_long_text(text, MAX_DOCUMENT_CHARS)
            else:
                yield text

    backend.train_from_iterator(counted(), trainer=trainer)
    if count == 0:
        raise ValueError("cannot train a tokenizer on an empty corpus (no documents)")
    ids = {token.content: backend.token_to_id(token.content) for token in specials}
    if task == "masked":
        backend.post_processor = processors.TemplateProcessing(
            single="<s> $A </s>",
            pair="<s> $A </s> </s> $B </s>",
            special_tokens=[("<s>", ids["<s>"]), ("</s>", ids["</s>"])],
        )
    else:
        backend.post_processor = processors.ByteLevel(trim_offsets=False)
    kwargs = dict(SPECIAL_TOKENS, **({"mask_token": MASK_TOKEN} if task == "masked" else {}))
    # a causal LM's batches are padded on the left, as batched `generate` needs (the new tokens follow the last real
    # one); training packs blocks and evaluation pads by itself, so only users' batches see the side
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, model_max_length=model_max_length or int(1e30),
                                        padding_side="left" if task == "causal" else "right", **kwargs)
    return tokenizer


# files one of which a saved tokenizer folder holds (fast, slow BPE, SentencePiece, WordPiece)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model", "spiece.model",
                   "vocab.txt")


def check_tokenizer_source(name_or_path: str | os.PathLike) -> None:
    """A local tokenizer folder, checked before transformers reads it: it exists (a path that does not is not
    taken for a Hub id), holds tokenizer files, and its files are regular and its JSON files objects (one line
    naming the file, instead of a library's traceback or a hang on a FIFO). A Hub id is left to transformers."""
    text = str(name_or_path)
    path = Path(text).expanduser()
    if not path.exists():
        if text.startswith(("/", "./", "../", "~")) or text.count("/") > 1 or text.endswith("/"):
            raise FileNotFoundError(f"tokenizer folder {text!r} does not exist; give a folder written by "
                                    f"tokenizer.save_pretrained, or a Hub id (namespace/name)")
        return
    if not path.is_dir():
        raise ValueError(f"tokenizer {text!r} is a file; give the folder that holds it (written by save_pretrained)")
    check_model_folder(path, "tokenizer folder")
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise FileNotFoundError(f"tokenizer folder {path} has no tokenizer files ({', '.join(TOKENIZER_FILES[:2])}, "
                                f"...): save one there with tokenizer.save_pretrained(folder)")


def load_pretrained_tokenizer(name_or_path: str, task: str, trust_remote_code: bool = False):
    """An existing tokenizer, completed for training: a causal LM without a pad token pads with eos; a masked LM
    needs a mask token (error otherwise). Its own Python code runs only with `trust_remote_code=True`."""
    from transformers import AutoTokenizer

    check_tokenizer_source(name_or_path)
    tokenizer = AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
    if tokenizer.eos_token is None and task == "causal":
        raise ValueError(f"tokenizer {name_or_path!r} has no eos token to separate packed documents; set one or train a tokenizer")
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError(f"tokenizer {name_or_path!r} has neither a pad nor an eos token")
        tokenizer.pad_token = tokenizer.eos_token
    if task == "masked" and tokenizer.mask_token is None:
        raise ValueError(
            f"tokenizer {name_or_path!r} has no mask token, which a masked LM needs; train one (tokenizer.pretrained: null)"
        )
    return tokenizer


def special_token_ids(tokenizer) -> dict[str, int]:
    """The ids a model config needs from its tokenizer: vocab_size and the special-token ids."""
    ids = {"vocab_size": len(tokenizer)}
    for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
        value = getattr(tokenizer, name, None)
        if value is not None:
            ids[name] = int(value)
    return ids
