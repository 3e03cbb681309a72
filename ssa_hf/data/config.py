"""The data section of a pretraining config (`DataConfig`): light to import (no torch), so that the command line
can list its keys at once; the work on the data is in `ssa_hf.data.corpus`."""

from __future__ import annotations

from dataclasses import dataclass, field

from .sources import TextSource

TASKS = ("causal", "masked")


@dataclass
class DataConfig:
    """The data of a pretraining run.

    train: the training source (a `TextSource`; a plain string is its path).
    validation: a separate held-out source; when null, `validation_documents` documents of `train` are held out.
    validation_documents: size of the held-out set in documents (0: no validation).
    block_size: causal LM: tokens per packed block.
    max_length: masked LM: at most this many tokens per input, `<s>` and `</s>` included.
    mlm_probability: masked LM: share of the ordinary tokens selected for prediction.
    mask_replace_prob: masked LM: share of the selected tokens replaced by <mask> (transformers' name).
    random_replace_prob: masked LM: share of the selected tokens replaced by a random other ordinary token; the
        remaining 1 - mask_replace_prob - random_replace_prob are left unchanged (still predicted).
    shuffle: map-style data: read in a seeded random order, a new permutation every epoch.
    shuffle_buffer: streamed data: shuffle with a buffer of this many examples (0: stream order). A resumed run
        refills the buffer, so it continues with a different (still seeded) order; keep 0 for exact resumption.
    pack_documents: documents tokenised (and, causal, packed) together.
    num_proc: processes for tokenising map-style data (null: one).
    validation_max_samples: evaluate at most this many validation blocks / sentences.
    """

    train: TextSource = field(default_factory=TextSource)
    validation: TextSource | None = None
    validation_documents: int = 1000
    block_size: int = 1024
    max_length: int = 128
    mlm_probability: float = 0.15
    mask_replace_prob: float = 1.0
    random_replace_prob: float = 0.0
    shuffle: bool = True
    shuffle_buffer: int = 0
    pack_documents: int = 1000
    num_proc: int | None = None
    validation_max_samples: int | None = None

    def validate(self, task: str, where: str = "data") -> None:
        if task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {task!r}")
        self.train.validate(f"{where}.train")
        if self.validation is not None:
            self.validation.validate(f"{where}.validation")
        if self.validation_documents < 0:
            raise ValueError(f"{where}.validation_documents must be >= 0, got {self.validation_documents}")
        if task == "causal" and self.block_size < 2:
            raise ValueError(f"{where}.block_size must be >= 2 (a block predicts block_size - 1 tokens), got {self.block_size}")
        if task == "masked":
            if self.max_length < 3:
                raise ValueError(f"{where}.max_length must be >= 3 (<s>, a token, </s>), got {self.max_length}")
            if not 0.0 < self.mlm_probability < 1.0:
                raise ValueError(f"{where}.mlm_probability must be in (0, 1), got {self.mlm_probability}")
            check_replace_probs(self.mask_replace_prob, self.random_replace_prob, where)
        if self.shuffle_buffer < 0 or self.pack_documents < 1:
            raise ValueError(f"{where}.shuffle_buffer must be >= 0 and {where}.pack_documents >= 1")


def check_replace_probs(mask_replace_prob: float, random_replace_prob: float, where: str = "data") -> None:
    """A ValueError unless both shares are in [0, 1] and together at most 1."""
    for name, value in (("mask_replace_prob", mask_replace_prob), ("random_replace_prob", random_replace_prob)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
            raise ValueError(f"{where}.{name} must be a number in [0, 1], got {value!r}")
    if mask_replace_prob + random_replace_prob > 1.0 + 1e-9:
        raise ValueError(
            f"{where}.mask_replace_prob + {where}.random_replace_prob must be <= 1 (the rest is left unchanged), got "
            f"{mask_replace_prob} + {random_replace_prob}"
        )
