"""Training corpora for causal and masked language models: splitting, tokenisation, packing, masking, batching.

- Causal LM: documents are tokenised without special tokens, joined with the eos token after each one, and cut
  into blocks of `block_size` tokens (the labels are the inputs; the model shifts them). `pack_documents`
  documents are packed together; what is left over at the end of such a group (less than one block) is dropped,
  the same way for map-style and streamed data.
- Masked LM, as BabyBERTa: one document (one sentence / utterance) per input, wrapped as `<s> ... </s>` and
  truncated to `max_length` tokens, padded per batch. `mlm_probability` of the ordinary tokens are selected for
  prediction; of those, `mask_replace_prob` become `<mask>`, `random_replace_prob` become a random other ordinary
  token and the rest stay as they are (the names and meaning of transformers' DataCollatorForLanguageModeling).
  BabyBERTa: 0.15 / 0.9 / 0.1 (never left unchanged); BERT and the authors' HF run: 0.15 / 0.8 / 0.1. A sentence in
  which nothing was selected gets one selected token, so that every input contributes to the loss.
- A held-out validation set: a separate source, or `validation_documents` documents held out of the training
  source (a seeded random choice for map-style data, the first documents of a stream).
- Batches come from a `BatchStream` whose position (`state_dict`) is saved in checkpoints: map-style data is read
  in a seeded permutation per epoch, the same global order for any number of processes (process r takes its slice
  of each global micro-batch); streamed data is split between processes by `datasets.distributed` and resumes
  from the `datasets` stream state. Masking draws from a generator seeded by (seed, process, micro-batch number),
  so a resumed run masks exactly as an uninterrupted one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .config import TASKS, DataConfig, check_replace_probs  # noqa: F401  (re-exported)
from .sources import load_texts

logger = logging.getLogger("ssa_hf.data")

# --------------------------------------------------------------------------------------------------
# Tokenisation: packing (causal) and one sentence per input (masked)
# --------------------------------------------------------------------------------------------------


def pack_documents(token_lists: list[list[int]], eos_id: int, block_size: int) -> list[list[int]]:
    """Join documents with `eos_id` after each one and cut the stream into full blocks (the remainder is dropped)."""
    stream: list[int] = []
    for tokens in token_lists:
        stream.extend(tokens)
        stream.append(eos_id)
    full = len(stream) // block_size
    return [stream[i * block_size : (i + 1) * block_size] for i in range(full)]


def _check_texts(batch: dict[str, list], indices: list[int] | None) -> None:
    for position, text in enumerate(batch["text"]):
        if not isinstance(text, str):
            where = f"record {indices[position]}" if indices is not None else "a record"
            raise ValueError(f"{where} of the data set: the text is {type(text).__name__}, not a string")


class CausalEncoder:
    """`datasets.map(batched=True)` function: texts -> packed blocks of token ids."""

    def __init__(self, tokenizer, block_size: int):
        if tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer has no eos token; causal packing needs one between documents")
        self.tokenizer = tokenizer
        self.block_size = block_size

    def tokenize(self, batch: dict[str, list], indices: list[int] | None = None) -> dict[str, list]:
        """One list of token ids per document (the parallel step: its result does not depend on the sharding)."""
        _check_texts(batch, indices)
        return {"token_ids": self.tokenizer(batch["text"], add_special_tokens=False, verbose=False)["input_ids"]}

    def pack(self, batch: dict[str, list]) -> dict[str, list]:
        return {"input_ids": pack_documents(batch["token_ids"], self.tokenizer.eos_token_id, self.block_size)}

    def __call__(self, batch: dict[str, list], indices: list[int] | None = None) -> dict[str, list]:
        return self.pack(self.tokenize(batch, indices))


class MaskedEncoder:
    """`datasets.map(batched=True)` function: one sentence -> one input `<s> ... </s>` of at most max_length."""

    def __init__(self, tokenizer, max_length: int):
        if tokenizer.mask_token_id is None:
            raise ValueError("the tokenizer has no mask token; a masked LM needs one")
        self.tokenizer = tokenizer
        self.max_length = max_length

    def __call__(self, batch: dict[str, list], indices: list[int] | None = None) -> dict[str, list]:
        _check_texts(batch, indices)
        encoded = self.tokenizer(batch["text"], add_special_tokens=True, truncation=True, max_length=self.max_length, verbose=False)
        return {"input_ids": encoded["input_ids"]}


def encoder_for(task: str, tokenizer, config: DataConfig):
    return CausalEncoder(tokenizer, config.block_size) if task == "causal" else MaskedEncoder(tokenizer, config.max_length)


# --------------------------------------------------------------------------------------------------
# Collation and masking
# --------------------------------------------------------------------------------------------------


def pad_rows(rows: list[list[int]], value: int, length: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded token rows [len(rows), length (default: the longest row)] and their attention mask (1 = token)."""
    length = max(len(r) for r in rows) if length is None else length
    ids = torch.full((len(rows), length), value, dtype=torch.long)
    mask = torch.zeros((len(rows), length), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        mask[i, : len(row)] = 1
    return ids, mask


def collate_causal(rows: list[list[int]]) -> dict[str, torch.Tensor]:
    input_ids = torch.tensor(rows, dtype=torch.long)
    return {"input_ids": input_ids, "labels": input_ids.clone()}


def _random_other_tokens(original: torch.Tensor, ordinary_ids: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """For each token of `original`, a uniformly drawn ordinary token other than itself (when it is ordinary):
    draw among all but one and step over the original's place in the sorted list."""
    count = ordinary_ids.numel()
    draw = torch.randint(0, count - 1, original.shape, generator=generator)
    place = torch.searchsorted(ordinary_ids, original).clamp(max=count - 1)
    is_ordinary = ordinary_ids[place] == original
    return ordinary_ids[draw + (is_ordinary & (draw >= place)).long()]


def mask_tokens(
    input_ids: torch.Tensor,
    maskable: torch.Tensor,
    mask_token_id: int,
    probability: float,
    generator: torch.Generator,
    mask_replace_prob: float = 1.0,
    random_replace_prob: float = 0.0,
    ordinary_ids: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Select `probability` of the maskable positions for prediction (a row with maskable positions but no
    selection gets one, uniformly chosen). Of the selected tokens, `mask_replace_prob` become the mask token,
    `random_replace_prob` a random ordinary token other than the original (`ordinary_ids`: the sorted ids that may
    be drawn, at least two) and the rest stay unchanged. Returns (inputs, labels) with labels -100 where nothing
    is predicted. With the defaults (BabyBERTa without random tokens) every selected token becomes the mask token
    and the generator is used exactly as before these options existed."""
    check_replace_probs(mask_replace_prob, random_replace_prob, "mask_tokens")
    chance = torch.rand(input_ids.shape, generator=generator)
    selected = (chance < probability) & maskable
    empty = maskable.any(dim=1) & ~selected.any(dim=1)
    if empty.any():
        pick = torch.rand(input_ids.shape, generator=generator).masked_fill(~maskable, -1.0).argmax(dim=1)
        rows = empty.nonzero(as_tuple=True)[0]
        selected[rows, pick[rows]] = True
    labels = torch.where(selected, input_ids, torch.full_like(input_ids, -100))
    if mask_replace_prob >= 1.0:
        inputs = torch.where(selected, torch.full_like(input_ids, mask_token_id), input_ids)
        return inputs, labels
    # one draw per position decides its fate: [0, m) mask, [m, m + r) random token, the rest unchanged
    fate = torch.rand(input_ids.shape, generator=generator)
    to_mask = selected & (fate < mask_replace_prob)
    to_random = selected & ~to_mask & (fate < mask_replace_prob + random_replace_prob)
    inputs = torch.where(to_mask, torch.full_like(input_ids, mask_token_id), input_ids)
    if random_replace_prob > 0.0:
        if ordinary_ids is None or ordinary_ids.numel() < 2:
            raise ValueError("random_replace_prob > 0 needs ordinary_ids: at least two token ids to draw from")
        inputs = torch.where(to_random, _random_other_tokens(input_ids, ordinary_ids, generator), inputs)
    return inputs, labels


class MaskedCollator:
    """Pads sentences to the longest of the batch and masks them with a given generator.

    probability, mask_replace_prob, random_replace_prob: as `mask_tokens` (transformers' collator names). Random
    replacements are drawn from the tokenizer's ordinary tokens (never a special token such as <pad> or <mask>)."""

    def __init__(self, tokenizer, probability: float, pad_to_multiple_of: int | None = None,
                 mask_replace_prob: float = 1.0, random_replace_prob: float = 0.0):
        check_replace_probs(mask_replace_prob, random_replace_prob, "MaskedCollator")
        self.pad_id = tokenizer.pad_token_id
        self.mask_id = tokenizer.mask_token_id
        self.special = torch.tensor(sorted(set(tokenizer.all_special_ids)), dtype=torch.long)
        self.probability = probability
        self.mask_replace_prob = mask_replace_prob
        self.random_replace_prob = random_replace_prob
        self.multiple = pad_to_multiple_of
        self.ordinary_ids = None
        if random_replace_prob > 0.0:
            every = torch.arange(len(tokenizer), dtype=torch.long)
            self.ordinary_ids = every[~torch.isin(every, self.special)]
            if self.ordinary_ids.numel() < 2:
                raise ValueError("random_replace_prob > 0 needs a tokenizer with at least two ordinary tokens")

    @classmethod
    def from_config(cls, tokenizer, config: DataConfig) -> MaskedCollator:
        """The collator of a run's data settings (mask rate and replacement shares)."""
        return cls(tokenizer, config.mlm_probability, mask_replace_prob=config.mask_replace_prob,
                   random_replace_prob=config.random_replace_prob)

    def mask(self, input_ids: torch.Tensor, maskable: torch.Tensor, generator: torch.Generator):
        """(inputs, labels) of padded ids whose `maskable` positions may be selected."""
        return mask_tokens(input_ids, maskable, self.mask_id, self.probability, generator,
                           self.mask_replace_prob, self.random_replace_prob, self.ordinary_ids)

    def __call__(self, rows: list[list[int]], generator: torch.Generator) -> dict[str, torch.Tensor]:
        length = max(len(r) for r in rows)
        if self.multiple:
            length = -(-length // self.multiple) * self.multiple
        input_ids, attention_mask = pad_rows(rows, self.pad_id, length)
        maskable = ~torch.isin(input_ids, self.special) & attention_mask.bool()
        inputs, labels = self.mask(input_ids, maskable, generator)
        return {"input_ids": inputs, "attention_mask": attention_mask, "labels": labels}


def batch_generator(seed: int, *keys: int) -> torch.Generator:
    """A torch generator seeded from (seed, *keys): the same numbers wherever and whenever it is made."""
    entropy = np.random.SeedSequence([int(seed) & 0xFFFFFFFF, *[int(k) & 0xFFFFFFFF for k in keys]])
    return torch.Generator().manual_seed(int(entropy.generate_state(1, dtype=np.uint64)[0] >> 1))


# --------------------------------------------------------------------------------------------------
# Batch streams with a resumable position
# --------------------------------------------------------------------------------------------------


class MapBatchStream:
    """Micro-batches of a map-style data set, in a seeded permutation per epoch. The position is global (the number
    of examples consumed in the epoch), so a run may resume on a different number of processes."""

    kind = "map"

    def __init__(self, dataset, per_device: int, rank: int, world: int, seed: int, shuffle: bool = True):
        self.dataset = dataset
        self.per_device, self.rank, self.world = per_device, rank, world
        self.seed, self.shuffle = seed, shuffle
        self.size = len(dataset)
        global_batch = per_device * world
        if self.size < global_batch:
            raise ValueError(
                f"the training set has {self.size} examples, fewer than one global micro-batch "
                f"({per_device} per process x {world} processes); use more data or a smaller batch"
            )
        self.epoch, self.cursor, self.batches_taken = 0, 0, 0
        self._order: np.ndarray | None = None
        self.last_indices: list[int] = []

    def _permutation(self) -> np.ndarray:
        if not self.shuffle:
            return np.arange(self.size)
        return np.random.default_rng([int(self.seed), int(self.epoch)]).permutation(self.size)

    def next_batch(self) -> list[list[int]]:
        global_batch = self.per_device * self.world
        if self.cursor + global_batch > self.size:
            self.epoch, self.cursor, self._order = self.epoch + 1, 0, None
        if self._order is None:
            self._order = self._permutation()
        start = self.cursor + self.rank * self.per_device
        indices = self._order[start : start + self.per_device].tolist()
        self.cursor += global_batch
        self.batches_taken += 1
        self.last_indices = indices
        return self.dataset[indices]["input_ids"]

    def state_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "epoch": self.epoch, "cursor": self.cursor, "batches_taken": self.batches_taken}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("kind") != self.kind:
            raise ValueError(f"the checkpoint's data position is for {state.get('kind')!r} data, this run reads {self.kind!r} data")
        limits = {"epoch": None, "cursor": self.size, "batches_taken": None}
        for name, top in limits.items():
            value = state.get(name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0 or (top is not None and value > top):
                raise ValueError(f"the checkpoint's data position has {name}={value!r}, not a whole number in "
                                 f"[0, {top if top is not None else 'inf'}]; the checkpoint is damaged (data_state_rank"
                                 f"{self.rank}.json): resume from another one")
        self.epoch, self.cursor, self.batches_taken = state["epoch"], state["cursor"], state["batches_taken"]
        self._order = None


class StreamBatchStream:
    """Micro-batches of a streamed (`IterableDataset`) data set, split between processes; restarts the stream at
    its end (a new epoch). The position is the `datasets` stream state of this process."""

    kind = "stream"

    def __init__(self, dataset, per_device: int, rank: int, world: int, seed: int, shuffle_buffer: int = 0):
        self.base = dataset
        self.per_device, self.rank, self.world = per_device, rank, world
        self.seed, self.shuffle_buffer = seed, shuffle_buffer
        self.epoch, self.batches_taken = 0, 0
        self._dataset = self._make()
        self._iterator = None
        self.last_indices: list[int] = []

    def _make(self):
        from datasets.distributed import split_dataset_by_node

        dataset = self.base
        if self.world > 1:
            dataset = split_dataset_by_node(dataset, rank=self.rank, world_size=self.world)
        if self.shuffle_buffer:
            dataset = dataset.shuffle(seed=self.seed, buffer_size=self.shuffle_buffer)
        dataset.set_epoch(self.epoch)
        return dataset

    def next_batch(self) -> list[list[int]]:
        rows: list[list[int]] = []
        restarted_empty = False
        while len(rows) < self.per_device:
            if self._iterator is None:
                self._iterator = iter(self._dataset)
            try:
                rows.append(next(self._iterator)["input_ids"])
                restarted_empty = False
            except StopIteration:
                if restarted_empty:
                    raise ValueError(
                        f"process {self.rank}'s share of the training stream yields no examples "
                        "(too few documents, or documents too short for one block)"
                    ) from None
                restarted_empty = True
                self.epoch += 1
                self._dataset, self._iterator = self._make(), None
        self.batches_taken += 1
        return rows

    def state_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "epoch": self.epoch,
            "batches_taken": self.batches_taken,
            "dataset": self._dataset.state_dict(),
            "world": self.world,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("kind") != self.kind:
            raise ValueError(f"the checkpoint's data position is for {state.get('kind')!r} data, this run reads {self.kind!r} data")
        if int(state.get("world", self.world)) != self.world:
            raise ValueError(
                f"the checkpoint streamed its data with {state['world']} processes; resume it with the same number "
                f"(got {self.world}): each process's stream position is its own"
            )
        self.epoch, self.batches_taken = int(state["epoch"]), int(state["batches_taken"])
        self._dataset = self._make()
        self._dataset.load_state_dict(state["dataset"])
        self._iterator = None


# --------------------------------------------------------------------------------------------------
# Building a corpus
# --------------------------------------------------------------------------------------------------


@dataclass
class Corpus:
    """Tokenised training data (map-style or streamed) and the materialised validation examples."""

    task: str
    train: Any
    validation: list[list[int]]
    streaming: bool
    train_description: str
    validation_description: str

    def batch_stream(self, per_device: int, rank: int, world: int, seed: int, config: DataConfig):
        if self.streaming:
            return StreamBatchStream(self.train, per_device, rank, world, seed, config.shuffle_buffer)
        return MapBatchStream(self.train, per_device, rank, world, seed, config.shuffle)

    @property
    def train_examples(self) -> int | None:
        return None if self.streaming else len(self.train)


def _is_stream(dataset) -> bool:
    import datasets

    return isinstance(dataset, datasets.IterableDataset)


def split_validation(config: DataConfig, seed: int = 0):
    """Load the texts of a run: (train texts, validation texts or None), as `datasets` data sets."""
    texts = load_texts(config.train)
    n = config.validation_documents
    if config.validation is not None:
        validation = load_texts(config.validation)
        if n:
            validation = validation.take(n) if _is_stream(validation) else validation.select(range(min(n, len(validation))))
        return texts, validation
    if n == 0:
        return texts, None
    if _is_stream(texts):
        return texts.skip(n), texts.take(n)
    if n >= len(texts):
        raise ValueError(
            f"data.validation_documents={n} holds out all {len(texts)} documents of {config.train.describe()}; "
            "lower it or give a separate data.validation source"
        )
    split = texts.train_test_split(test_size=n, seed=seed, shuffle=True)
    return split["train"], split["test"]


def iter_text_column(texts, limit: int | None = None):
    """The `text` values of a data set (map-style or streamed), at most `limit` (for tokenizer training)."""
    for index, record in enumerate(texts):
        if limit is not None and index >= limit:
            return
        yield record["text"]


def build_corpus(
    config: DataConfig, tokenizer, task: str, texts=None, seed: int = 0, show_progress: bool = True
) -> Corpus:
    """Tokenise the data of a run (see the module docstring). `texts`: the result of `split_validation` when the
    caller already has it (e.g. to train the tokenizer on the training split first)."""
    import datasets

    config.validate(task)
    if not show_progress:
        datasets.disable_progress_bars()
    train, validation = texts if texts is not None else split_validation(config, seed)
    encoder = encoder_for(task, tokenizer, config)
    streaming = _is_stream(train)
    map_kwargs: dict[str, Any] = {"batched": True, "batch_size": config.pack_documents, "remove_columns": ["text"],
                                  "with_indices": True}
    if streaming:
        train = train.map(encoder, **map_kwargs)
    elif task == "causal":
        # tokenised in parallel, packed in one process: the groups of pack_documents documents that are packed
        # together must not depend on how num_proc shards the data (the examples and their order are the same
        # for any num_proc)
        ids = train.map(encoder.tokenize, num_proc=config.num_proc, desc="tokenising", **map_kwargs)
        train = ids.map(encoder.pack, batched=True, batch_size=config.pack_documents, remove_columns=["token_ids"],
                        desc="packing")
    else:
        train = train.map(encoder, num_proc=config.num_proc, desc="tokenising", **map_kwargs)
    if not streaming:
        if len(train) == 0:
            raise ValueError(
                f"no training examples from {config.train.describe()}"
                + (f" (documents shorter than one block of {config.block_size}?)" if task == "causal" else "")
            )
    examples: list[list[int]] = []
    if validation is not None:
        for record in validation.map(encoder, **map_kwargs):
            examples.append(record["input_ids"])
            if config.validation_max_samples is not None and len(examples) >= config.validation_max_samples:
                break
        if not examples:
            raise ValueError(
                "the validation set yields no examples"
                + (f" (fewer tokens than one block of {config.block_size}?)" if task == "causal" else "")
                + "; raise data.validation_documents or lower data.block_size"
            )
    source = config.validation.describe() if config.validation is not None else (
        f"{config.validation_documents} documents held out of the training source" if validation is not None else "none"
    )
    return Corpus(task, train, examples, streaming, config.train.describe(), source)
