"""Tiny models and a tiny tokenizer for the model tests (built here, no downloads)."""

from __future__ import annotations

import copy

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

import ssa_hf  # noqa: F401  (registers the Auto classes)
from ssa_hf import SSABertConfig, SSABertForMaskedLM, SSALlamaConfig, SSALlamaForCausalLM

TEXT = [
    "the cat sat on the mat and the dog sat on the log",
    "every child likes some toys and some children like every toy",
    "a small model learns to count the words in a sentence",
    "where did the ball go? it rolled under the big red chair",
] * 5


def tiny_tokenizer(masked: bool = False) -> PreTrainedTokenizerFast:
    specials = ["<pad>", "<s>", "</s>", "<unk>"] + (["<mask>"] if masked else [])
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(TEXT, trainers.BpeTrainer(vocab_size=320, special_tokens=specials, show_progress=False))
    if masked:
        tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")))
    kwargs = dict(pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    if masked:
        kwargs["mask_token"] = "<mask>"
    return PreTrainedTokenizerFast(tokenizer_object=tok, **kwargs)


def llama_config(tokenizer=None, **overrides) -> SSALlamaConfig:
    tokenizer = tokenizer or tiny_tokenizer()
    kwargs = dict(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
    )
    kwargs.update(overrides)
    return SSALlamaConfig(**kwargs)


def bert_config(tokenizer=None, **overrides) -> SSABertConfig:
    tokenizer = tokenizer or tiny_tokenizer(masked=True)
    kwargs = dict(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=70, pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )
    kwargs.update(overrides)
    return SSABertConfig(**kwargs)


def build(family: str, scoring="ssa", seed: int = 0, **overrides):
    """A tiny model of `family` ("llama" causal LM or "bert" masked LM), with larger-than-default weights so
    scores are large enough that the scoring function matters."""
    torch.manual_seed(seed)
    overrides.setdefault("initializer_range", 0.1)
    if family == "llama":
        model = SSALlamaForCausalLM(llama_config(attention_scoring=scoring, **overrides))
    else:
        model = SSABertForMaskedLM(bert_config(attention_scoring=scoring, **overrides))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("q_proj.weight", "k_proj.weight", "query.weight", "key.weight")):
                p.mul_(3.0)
    return model.eval()


def copy_config(config):
    return copy.deepcopy(config)
