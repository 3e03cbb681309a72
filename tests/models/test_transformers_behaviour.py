"""Our classes behave like the stock transformers classes where tools rely on it: forward signatures (Trainer's
remove_unused_columns, pipelines), the standard attn_implementation names and output_attentions, Trainer, pipelines,
generate with static and dynamic caches, gradient checkpointing, resize_token_embeddings, bf16 save/load and
RoBERTa-style cross-attention. Shared runners over families x scoring functions."""

from __future__ import annotations

import copy
import inspect
import json

import pytest
import torch
from transformers import (
    GPT2LMHeadModel,
    GPT2Model,
    LlamaForCausalLM,
    LlamaModel,
    RobertaForMaskedLM,
    RobertaModel,
    pipeline,
)

import ssa_hf
from ssa_hf.models.scoring import get_scoring_function

from .test_modeling import batch_for, forward
from .tiny import CAUSAL_FAMILIES, FAMILIES_UNDER_TEST, auto_class, build, is_causal, spec, tiny_config, tiny_tokenizer

FAMILIES = tuple(FAMILIES_UNDER_TEST)  # every family of the family table
SCORINGS = ("ssa", "softmax")
CASES = [(f, s) for f in FAMILIES for s in SCORINGS]
IDS = [f"{f}-{s}" for f, s in CASES]
AUTO = {f: auto_class(f) for f in FAMILIES}

# every class and the stock class whose forward signature it must keep
SIGNATURES = [
    (ssa_hf.SSALlamaModel, LlamaModel), (ssa_hf.SSALlamaForCausalLM, LlamaForCausalLM),
    (ssa_hf.SSABertModel, RobertaModel), (ssa_hf.SSABertForMaskedLM, RobertaForMaskedLM),
    (ssa_hf.SSAGPT2Model, GPT2Model), (ssa_hf.SSAGPT2LMHeadModel, GPT2LMHeadModel),
]


def config_for(family, scoring, **overrides):
    return tiny_config(family, attention_scoring=scoring, **overrides)


@pytest.mark.parametrize("ours,stock", SIGNATURES, ids=lambda c: c.__name__)
def test_forward_signature_is_the_stock_one(ours, stock):
    parameters = list(inspect.signature(ours.forward).parameters)
    assert parameters == list(inspect.signature(stock.forward).parameters)
    assert "input_ids" in parameters and "args" not in parameters


# ---- attn_implementation names ---------------------------------------------------------------------------------


def _weights_and_logits(model, ids, mask):
    with torch.no_grad():
        out = forward(model, ids, mask, output_attentions=True)
    return out.attentions, out.logits


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("scoring", ["ssa", "softmax", "sigmoid", "linear"])
@pytest.mark.parametrize("requested,runs", [("eager", "ssa_eager"), ("sdpa", "ssa_auto"), (None, "ssa_auto")])
def test_standard_implementation_names_run_the_configured_scoring(family, scoring, requested, runs):
    reference = build(family, scoring)
    model = AUTO[family].from_config(copy.deepcopy(reference.config), attn_implementation=requested)
    model.load_state_dict(reference.state_dict())
    model.eval()
    assert model.config._attn_implementation == runs
    ids, mask = batch_for(model)
    weights, logits = _weights_and_logits(model, ids, mask)
    with torch.no_grad():
        torch.testing.assert_close(logits, forward(reference, ids, mask).logits, atol=2e-4, rtol=1e-4)
    assert len(weights) == model.config.num_hidden_layers and weights[0].shape[-1] == ids.shape[1]
    assert (weights[0][0][..., ~mask[0].bool()] == 0).all(), "padded keys get zero weight"
    if get_scoring_function(scoring).normalised:
        torch.testing.assert_close(weights[0][1].sum(-1), torch.ones_like(weights[0][1].sum(-1)))
    # the same weights under softmax: equal only when softmax was asked for (never softmax in place of SSA)
    twin = build(family, "softmax")
    twin.load_state_dict(reference.state_dict(), strict=False)
    twin.set_attn_implementation(requested or "sdpa")
    softmax_weights, _ = _weights_and_logits(twin, ids, mask)
    difference = (weights[0] - softmax_weights[0]).abs().max()
    assert difference < 1e-5 if scoring == "softmax" else difference > 1e-2


@pytest.mark.parametrize("family", FAMILIES)
def test_output_attentions_config_flag_accepts_ssa_implementations(family):
    model = build(family, "ssa")
    model.config.output_attentions = True  # transformers' own config allows this only with its softmax "eager"
    ids, mask = batch_for(model)
    with torch.no_grad():
        assert len(forward(model, ids, mask).attentions) == model.config.num_hidden_layers
    model.config.output_attentions = False
    model.set_attn_implementation("ssa_blockwise")
    with pytest.raises(ValueError, match="output_attentions=True needs attention weights"):
        model.config.output_attentions = True


def test_implementation_aliases_are_saved_and_validated(tmp_path):
    model = build("llama", "ssa")
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())["attn_implementation_aliases"]
    assert saved == {"eager": "ssa_eager", "sdpa": "ssa_auto", "flex_attention": "ssa_flex"}
    with pytest.raises(ValueError, match="attn_implementation_aliases"):
        tiny_config("llama", attn_implementation_aliases={"sdpa": "sdpa"})


# ---- Trainer ---------------------------------------------------------------------------------------------------


def _trainer(model, tokenizer, tmp_path, collator=None, **kwargs):
    from datasets import Dataset
    from transformers import Trainer, TrainingArguments

    sentences = ["the cat sat on the mat and the dog sat on the log", "every child likes some toys"] * 8
    # "text" is a column no forward takes: remove_unused_columns (on by default) must drop it, and only it
    data = Dataset.from_dict({"text": sentences}).map(lambda r: tokenizer(r["text"]))
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=3, per_device_train_batch_size=4, learning_rate=5e-2,
                             report_to=[], save_strategy="no", use_cpu=True, disable_tqdm=True, remove_unused_columns=True)
    return Trainer(model=model, args=args, train_dataset=data, data_collator=collator, **kwargs)


@pytest.mark.parametrize("family,scoring", CASES, ids=IDS)
def test_trainer_trains_lm_heads_with_remove_unused_columns(family, scoring, tmp_path):
    from transformers import DataCollatorForLanguageModeling

    tokenizer = tiny_tokenizer(masked=not is_causal(family))
    model = build(family, scoring).train()
    collator = DataCollatorForLanguageModeling(tokenizer, mlm=not is_causal(family), mlm_probability=0.3)
    trainer = _trainer(model, tokenizer, tmp_path, collator)
    before = model.scoring_parameters()
    result = trainer.train()
    assert result.global_step == 3 and torch.isfinite(torch.tensor(result.training_loss))
    if scoring == "ssa":
        after = model.scoring_parameters()
        assert after != before, "b and n must be trained"
        assert all(min(layer["b"]) > 0 and min(layer["n"]) >= 1 for layer in after.values())


@pytest.mark.parametrize("family", FAMILIES)
def test_trainer_keeps_input_ids_for_the_base_model(family, tmp_path):
    from transformers import DataCollatorWithPadding

    tokenizer = tiny_tokenizer(masked=not is_causal(family))
    base = spec(family).model_classes["base"](config_for(family, "ssa"))
    seen = []

    def loss_on_hidden_states(outputs, labels, num_items_in_batch=None):
        seen.append(outputs.last_hidden_state.shape)
        return outputs.last_hidden_state.pow(2).mean()

    trainer = _trainer(base, tokenizer, tmp_path, DataCollatorWithPadding(tokenizer), compute_loss_func=loss_on_hidden_states)
    assert set(trainer._remove_unused_columns(trainer.train_dataset).column_names) == {"input_ids", "attention_mask"}
    trainer.train()
    assert len(seen) == 3


# ---- pipelines -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("causal_family", CAUSAL_FAMILIES)
@pytest.mark.parametrize("scoring", SCORINGS)
def test_text_generation_and_fill_mask_pipelines(scoring, causal_family):
    generator = pipeline("text-generation", model=build(causal_family, scoring), tokenizer=tiny_tokenizer())
    text = generator("the cat", max_new_tokens=4, do_sample=False)[0]["generated_text"]
    assert text.startswith("the cat") and len(text) > len("the cat")
    fill = pipeline("fill-mask", model=build("bert", scoring), tokenizer=tiny_tokenizer(masked=True))
    predictions = fill("the cat <mask> on the mat")
    assert len(predictions) == 5 and all(0 <= p["score"] <= 1 for p in predictions)
    assert sum(p["score"] for p in predictions) <= 1 + 1e-6


# ---- generate, caches ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", CAUSAL_FAMILIES)
@pytest.mark.parametrize("scoring", SCORINGS)
def test_generate_static_and_dynamic_caches_agree(scoring, family):
    tokenizer = tiny_tokenizer()
    tokenizer.padding_side = "left"
    model = build(family, scoring)
    batch = tokenizer(["the cat sat", "every child likes some toys and"], return_tensors="pt", padding=True)
    outputs = {}
    with torch.no_grad():
        for cache in ("dynamic", "static"):
            outputs[cache] = model.generate(**batch, max_new_tokens=8, do_sample=False, pad_token_id=tokenizer.pad_token_id,
                                            cache_implementation=cache, output_scores=True, return_dict_in_generate=True)
    assert outputs["static"].sequences.tolist() == outputs["dynamic"].sequences.tolist()
    for static, dynamic in zip(outputs["static"].scores, outputs["dynamic"].scores):
        torch.testing.assert_close(static, dynamic, atol=1e-4, rtol=1e-4)


# ---- gradient checkpointing, resize, bf16 ----------------------------------------------------------------------


@pytest.mark.parametrize("family,scoring", CASES, ids=IDS)
def test_gradient_checkpointing_gives_same_gradients(family, scoring):
    grads = []
    for checkpointing in (False, True):
        model = build(family, scoring).train()
        if checkpointing:
            model.activation_checkpointing_enable()
            assert model.is_activation_checkpointing
        ids, mask = batch_for(model)
        forward(model, ids, mask, labels=ids.masked_fill(mask == 0, -100)).loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and any(".scoring." in n for n in grads[0]) == (scoring == "ssa")
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("family,scoring", CASES, ids=IDS)
def test_resize_token_embeddings(family, scoring, tmp_path):
    model = build(family, scoring)
    old = model.config.vocab_size
    model.resize_token_embeddings(old + 7)
    assert model.config.vocab_size == old + 7
    assert model.get_input_embeddings().weight.shape[0] == old + 7
    assert model.get_output_embeddings().weight.shape[0] == old + 7
    ids, mask = batch_for(model)
    ids[0, -1] = old + 6  # a new token
    with torch.no_grad():
        logits = forward(model, ids, mask).logits
    assert logits.shape[-1] == old + 7 and torch.isfinite(logits).all()
    model.save_pretrained(tmp_path)
    loaded = AUTO[family].from_pretrained(tmp_path).eval()
    with torch.no_grad():
        torch.testing.assert_close(forward(loaded, ids, mask).logits, logits, atol=0, rtol=0)


@pytest.mark.parametrize("family,scoring", CASES, ids=IDS)
def test_bf16_save_and_load(family, scoring, tmp_path):
    model = build(family, scoring).to(torch.bfloat16)
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["dtype"] == "bfloat16"
    ids, mask = batch_for(model)
    results = []
    for dtype in ("auto", torch.bfloat16):
        loaded = AUTO[family].from_pretrained(tmp_path, dtype=dtype).eval()
        assert {p.dtype for p in loaded.parameters()} == {torch.bfloat16}
        saved = model.state_dict()
        for name, tensor in loaded.state_dict().items():
            assert torch.equal(tensor, saved[name]), name
        with torch.no_grad():
            results.append(forward(loaded, ids, mask).logits)
        assert results[-1].dtype == torch.bfloat16 and torch.isfinite(results[-1]).all()
    torch.testing.assert_close(results[0], results[1], atol=0, rtol=0)
    # Llama's rotary frequencies are recomputed in float32 at load, while `.to(bfloat16)` rounded them in memory:
    # the loaded model matches the in-memory one to bf16 precision, as the stock classes do
    with torch.no_grad():
        torch.testing.assert_close(results[0], forward(model, ids, mask).logits, atol=5e-2, rtol=5e-2)


# ---- cross-attention (SSABert as a decoder) --------------------------------------------------------------------


@pytest.mark.parametrize("scoring", SCORINGS)
def test_bert_decoder_with_cross_attention(scoring):
    torch.manual_seed(0)
    config = config_for("bert", scoring, is_decoder=True, add_cross_attention=True, initializer_range=0.1)
    model = ssa_hf.SSABertForCausalLM(config).eval()
    cross = model.roberta.encoder.layer[0].crossattention.self
    assert hasattr(cross, "scoring") and cross.scoring.scoring == scoring
    ids, mask = batch_for(model, left_pad=False)
    memory = torch.randn(3, 5, config.hidden_size) * 3
    memory_mask = torch.ones(3, 5, dtype=torch.long)
    memory_mask[0, -2:] = 0
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, encoder_hidden_states=memory, encoder_attention_mask=memory_mask,
                    output_attentions=True)
        moved = model(input_ids=ids, attention_mask=mask, encoder_hidden_states=memory + 1,
                      encoder_attention_mask=memory_mask).logits
    assert torch.isfinite(out.logits).all() and (moved - out.logits).abs().max() > 1e-3, "the decoder reads the memory"
    cross_weights = out.cross_attentions[0]
    assert cross_weights.shape == (3, config.num_attention_heads, ids.shape[1], 5)
    assert (cross_weights[0, ..., -2:] == 0).all(), "masked memory positions get zero weight"
    self_weights = out.attentions[0]
    assert (self_weights[1].triu(1) == 0).all(), "a decoder's self-attention is causal"


def test_cross_attention_needs_a_decoder():
    with pytest.raises(ValueError, match="decoder"):
        ssa_hf.SSABertModel(config_for("bert", "ssa", add_cross_attention=True))


# ---- custom 4-D masks ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scoring", SCORINGS)
def test_custom_4d_float_mask_equals_the_2d_mask(scoring):
    model = build("llama", scoring)
    ids, mask = batch_for(model)
    length = ids.shape[1]
    keep = torch.ones(length, length, dtype=torch.bool).tril()[None, None] & mask.bool()[:, None, None, :]
    additive = torch.zeros(keep.shape).masked_fill(~keep, torch.finfo(torch.float32).min)
    with torch.no_grad():
        expected = forward(model, ids, mask).logits
        got = model(input_ids=ids, attention_mask=additive, position_ids=(mask.cumsum(-1) - 1).clamp_min(0)).logits
    real = mask.bool()
    torch.testing.assert_close(got[real], expected[real], atol=2e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="float attention mask with values other than 0"):
        model(input_ids=ids, attention_mask=additive.clamp_min(-1e4))
