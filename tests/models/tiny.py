"""Tiny models and a tiny tokenizer for the model tests (built here, no downloads)."""

from __future__ import annotations

import copy

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

import ssa_hf  # noqa: F401  (registers the Auto classes)
from ssa_hf import SSABertConfig, SSAGPT2Config, SSALlamaConfig
from ssa_hf.models.families import FAMILIES, TASKS

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


def gpt2_config(tokenizer=None, **overrides) -> SSAGPT2Config:
    tokenizer = tokenizer or tiny_tokenizer()
    kwargs = dict(
        vocab_size=len(tokenizer), n_embd=32, n_layer=2, n_head=4, n_positions=128, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    kwargs.update(overrides)
    return SSAGPT2Config(**kwargs)


# every family of the table (ssa_hf/models/families.py) by its short name, with its tiny config: a family added
# to the table without one here fails test_every_family_has_a_tiny_config
TINY_CONFIGS = {"llama": llama_config, "bert": bert_config, "gpt2": gpt2_config}
FAMILY_NAMES = {name.removeprefix("ssa_"): name for name in FAMILIES}
FAMILIES_UNDER_TEST = list(FAMILY_NAMES)
CAUSAL_FAMILIES = [f for f, name in FAMILY_NAMES.items() if FAMILIES[name].default_task == "causal_lm"]


def spec(family: str):
    return FAMILIES[FAMILY_NAMES[family]]


def tiny_config(family: str, tokenizer=None, **overrides):
    if tokenizer is None and spec(family).default_task == "masked_lm":
        tokenizer = tiny_tokenizer(masked=True)
    return TINY_CONFIGS[family](tokenizer, **overrides)


def auto_class(family: str):
    """The Auto class of the family's default head (AutoModelForCausalLM, AutoModelForMaskedLM)."""
    return TASKS[spec(family).default_task].auto_class


def is_causal(family: str) -> bool:
    return family in CAUSAL_FAMILIES


def build(family: str, scoring="ssa", seed: int = 0, **overrides):
    """A tiny model of `family` (a short name of the family table: "llama", "bert", "gpt2") with its default head,
    with larger-than-default query and key weights so scores are large enough that the scoring function
    matters."""
    torch.manual_seed(seed)
    overrides.setdefault("initializer_range", 0.1)
    model = spec(family).model_class()(tiny_config(family, attention_scoring=scoring, **overrides))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("q_proj.weight", "k_proj.weight", "query.weight", "key.weight")):
                p.mul_(3.0)
            if name.endswith("attn.c_attn.weight"):  # GPT-2's fused [q | k | v] projection (Conv1D: [in, 3 out])
                p[:, : 2 * p.shape[0]].mul_(3.0)
    return model.eval()


def copy_config(config):
    return copy.deepcopy(config)
