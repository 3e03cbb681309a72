"""Validation during pretraining: fixed inputs (masked LM: masks seeded per example, the same at every
evaluation) and the mean token negative log-likelihood and perplexity over all processes."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..data.corpus import Corpus, MaskedCollator, batch_generator, collate_causal, pad_rows
from .config import PretrainConfig

EVAL_SEED_KEY = 0x5EED  # masking of the validation set: seeded by (seed, this key, example index)


def prepare_validation(corpus: Corpus, tokenizer, config: PretrainConfig) -> list[tuple[list[int], list[int] | None]]:
    """Validation inputs with fixed masks (masked LM: seeded per example, the same at every evaluation)."""
    if config.task == "causal":
        return [(row, None) for row in corpus.validation]
    collator = MaskedCollator.from_config(tokenizer, config.data)  # the training corruption, fixed per sentence
    prepared = []
    for index, row in enumerate(corpus.validation):
        ids = torch.tensor([row])
        maskable = ~torch.isin(ids, collator.special)
        inputs, labels = collator.mask(ids, maskable, batch_generator(config.seed, EVAL_SEED_KEY, index))
        prepared.append((inputs[0].tolist(), labels[0].tolist()))
    return prepared


def token_nll(model, batch: dict[str, torch.Tensor], task: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum of the negative log-likelihoods, number of predicted tokens) of a batch, in float32."""
    kwargs = {"input_ids": batch["input_ids"]}
    if "attention_mask" in batch:
        kwargs["attention_mask"] = batch["attention_mask"]
    logits = model(**kwargs).logits.float()
    labels = batch["labels"]
    if task == "causal":
        logits, labels = logits[:, :-1], labels[:, 1:]
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100, reduction="sum")
    return nll, (labels != -100).sum()


@torch.no_grad()
def evaluate(model, examples, task: str, pad_id: int, batch_size: int, accelerator) -> dict[str, float]:
    """Validation loss (mean token NLL) and perplexity over all processes (each takes every n-th example)."""
    was_training = model.training
    model.eval()
    mine = examples[accelerator.process_index :: accelerator.num_processes]
    total = torch.zeros(2, dtype=torch.float64, device=accelerator.device)
    for start in range(0, len(mine), batch_size):
        chunk = mine[start : start + batch_size]
        if task == "causal":
            batch = collate_causal([row for row, _ in chunk])
        else:
            inputs, attention_mask = pad_rows([row for row, _ in chunk], pad_id)
            labels, _ = pad_rows([labels for _, labels in chunk], -100)
            batch = {"input_ids": inputs, "attention_mask": attention_mask, "labels": labels}
        batch = {k: v.to(accelerator.device) for k, v in batch.items()}
        with accelerator.autocast():
            nll, count = token_nll(model, batch, task)
        total += torch.stack([nll.double(), count.double()])
    total = accelerator.reduce(total, reduction="sum")
    if was_training:
        model.train()
    loss = float(total[0] / total[1]) if total[1] > 0 else float("nan")
    return {"loss": loss, "perplexity": math.exp(loss) if loss < 700 else float("inf"), "tokens": int(total[1])}
