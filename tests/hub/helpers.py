"""Tiny source checkpoints and inputs shared by the hub tests."""

from __future__ import annotations

from pathlib import Path

import torch


VOCAB = 64


SECRET = "hf_ssaTestTokenNeverPrinted0123456789"


def tiny_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(["<s>", "<pad>", "</s>", "<unk>"] + [f"w{i}" for i in range(VOCAB - 4)])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   unk_token="<unk>")


def sharpen(model, factor: float = 20.0, mix: float = 5.0) -> None:
    """Scale query and key projections so attention scores are large (for small scores SSA behaves like a
    softmax at temperature 1/(n b)), and value/output projections so attention matters for the output: SSA then
    differs clearly from softmax."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if any(k in name for k in ("q_proj.weight", "k_proj.weight", "self.query.weight", "self.key.weight")):
                p.mul_(factor)
            if any(k in name for k in ("v_proj.weight", "o_proj.weight", "self.value.weight", "attention.output.dense.weight")):
                p.mul_(mix)
            if name.endswith("attn.c_attn.weight"):  # GPT-2's fused [q | k | v] projection (Conv1D: [in, 3 out])
                width = p.shape[0]
                p[:, : 2 * width].mul_(factor)
                p[:, 2 * width :].mul_(mix)
            if name.endswith("attn.c_proj.weight"):
                p.mul_(mix)


def make_llama(folder: Path):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))
    sharpen(model)
    model.save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return model


def make_roberta(folder: Path):
    from transformers import RobertaConfig, RobertaForMaskedLM

    torch.manual_seed(1)
    model = RobertaForMaskedLM(RobertaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                             num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=40))
    sharpen(model)
    model.save_pretrained(folder)
    return model


def make_bert(folder: Path, **kwargs):
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(2)
    model = BertForMaskedLM(BertConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                       num_attention_heads=4, max_position_embeddings=24, **kwargs))
    sharpen(model)
    model.save_pretrained(folder)
    return model


def make_gpt2(folder: Path):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(3)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                       bos_token_id=0, eos_token_id=2))
    sharpen(model)
    model.save_pretrained(folder)
    return model


SOURCES = {"llama": make_llama, "roberta": make_roberta, "bert": make_bert, "gpt2": make_gpt2}


CAUSAL = ("llama", "gpt2")


def inputs_for(kind: str, seed: int = 0, padded: bool = False):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (2, 10), generator=g)  # ids 0..2 are special (pad is 1 for RoBERTa, 0 for BERT)
    mask = torch.ones_like(ids)
    if padded:
        pad = 0 if kind == "bert" else 1
        ids[1, 6:] = pad
        mask[1, 6:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def load_converted(folder: Path, kind: str):
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    auto = AutoModelForCausalLM if kind in CAUSAL else AutoModelForMaskedLM
    return auto.from_pretrained(folder).eval()


# lm-eval results as its JSON holds them (two tasks)
LM_EVAL_JSON = {
    "results": {
        "arc_easy": {"alias": "arc_easy", "acc,none": 0.41, "acc_stderr,none": 0.01, "acc_norm,none": 0.39,
                     "acc_norm_stderr,none": 0.012},
        "boolq": {"alias": "boolq", "acc,none": 0.6, "acc_stderr,none": 0.02},
    },
    "n-shot": {"arc_easy": 0, "boolq": 0},
    "configs": {"arc_easy": {"dataset_path": "allenai/ai2_arc", "dataset_name": "ARC-Easy", "test_split": "test"},
                "boolq": {"dataset_path": "super_glue", "dataset_name": "boolq", "validation_split": "validation"}},
}
