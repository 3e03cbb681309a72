"""Linear attention and CosFormer (ssa_hf/models/linear.py) against their float64 references, the functional
mixture of scoring heads, and both mechanisms inside SSALlama / SSABert (training, padding, KV cache, generate,
save/load, remote code, refusals)."""

import copy
import json
import subprocess
import sys
import textwrap

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, DynamicCache

from ssa_hf.models.attention import BACKENDS, scored_attention, supported_backends
from ssa_hf.models.linear import LINEAR_ATTENTIONS, LinearMask, linear_mask
from ssa_hf.models.scoring import ALL_SCORING_FUNCTIONS, SCORING_FUNCTIONS, get_scoring_function
from ssa_hf.models.settings import ScoringParameters, resolve_settings, validate_settings

from .tiny import bert_config, build, llama_config, tiny_tokenizer

NAMES = list(LINEAR_ATTENTIONS)
M = torch.tensor([75.0, 90.0, 120.0, 300.0], dtype=torch.float64)  # CosFormer length scales, one per head


def qkv(batch=2, heads=4, kv_heads=2, q_len=9, kv_len=9, dim=6, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, q_len, dim, generator=g, dtype=dtype)
    k = torch.randn(batch, kv_heads, kv_len, dim, generator=g, dtype=dtype)
    v = torch.randn(batch, kv_heads, kv_len, dim, generator=g, dtype=dtype)
    return q, k, v


def padding(batch, kv_len):
    keep = torch.ones(batch, kv_len, dtype=torch.bool)
    keep[0, :2] = False  # left padding
    keep[1, -3:] = False  # right padding
    return keep


def causal(q_len, kv_len, offset):
    return torch.arange(kv_len)[None, :] <= torch.arange(q_len)[:, None] + offset


# (name, q_len, kv_len, how the mask is given, offset of the query positions)
MASK_CASES = {
    # a key-padding mask, bidirectional (an encoder)
    "bidirectional": (9, 9, "padding", 0),
    # the full [B, 1, L, L] boolean mask transformers builds for a padded causal batch
    "causal-full-mask": (9, 9, "full", 0),
    # chunked prefill with a KV cache: the queries are the last 4 of 11 positions (bottom-right causal)
    "kv-cache": (4, 11, "full", 7),
    # one decoding step: a [B, 1, 1, Lk] mask
    "decode": (1, 11, "padding", 10),
    # functional is_causal (top-left, as F.scaled_dot_product_attention) with Lq < Lk and key padding
    "is-causal-top-left": (5, 9, "is_causal+padding", 0),
    # ... with more queries than keys: the last queries see every key
    "is-causal-more-queries": (9, 5, "is_causal+padding", 0),
    # no mask, longer than one chunk (64) of the causal loop
    "is-causal-long": (70, 70, "is_causal", 0),
}


def case_inputs(case, dtype=torch.float64, grad=False):
    q_len, kv_len, kind, offset = MASK_CASES[case]
    q, k, v = [t.requires_grad_(grad) for t in qkv(q_len=q_len, kv_len=kv_len, dtype=dtype)]
    keep = padding(2, kv_len) if "padding" in kind or kind == "full" else torch.ones(2, kv_len, dtype=torch.bool)
    is_causal = kind.startswith("is_causal")
    if kind == "full":
        attn_mask = (causal(q_len, kv_len, offset)[None] & keep[:, None, :])[:, None]
    elif "padding" in kind:
        attn_mask = keep[:, None, None, :]
    else:
        attn_mask = None
    causal_part = kind == "full" or is_causal
    dense = keep[:, None, None, :] & (causal(q_len, kv_len, offset) if causal_part else torch.ones(q_len, kv_len, dtype=torch.bool))
    positions = torch.arange(q_len) + offset
    return (q, k, v), dict(attn_mask=attn_mask, is_causal=is_causal), dense, positions


def params_for(name, dtype=torch.float64):
    return {"m": M.to(dtype)} if name == "cosformer" else {}


@pytest.mark.parametrize("case", list(MASK_CASES))
@pytest.mark.parametrize("name", NAMES)
def test_values_and_gradients_match_float64_reference(name, case):
    spec = LINEAR_ATTENTIONS[name]
    (q, k, v), kwargs, dense, positions = case_inputs(case, grad=True)
    params = params_for(name)
    out, weights = scored_attention(q, k, v, name, params, enable_gqa=True, return_weights=True, **kwargs)
    fast = scored_attention(q, k, v, name, params, enable_gqa=True, **kwargs)  # the linear-time path
    # the causal loop in chunks of 3 (several chunks, a running state across them)
    structure = linear_mask(kwargs["attn_mask"], q.shape[2], k.shape[2], kwargs["is_causal"])
    chunked = spec.attend(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), params, structure, chunk=3)
    ref_inputs = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    ref_out, ref_weights = spec.reference_attention(*ref_inputs, params, dense, positions)
    for got in (out, fast, chunked):
        torch.testing.assert_close(got, ref_out, atol=1e-10, rtol=1e-9)
    torch.testing.assert_close(weights, ref_weights, atol=1e-12, rtol=1e-9)
    assert (weights[~dense.expand_as(weights)] == 0).all(), "masked keys get exactly zero weight"
    upstream = torch.randn_like(ref_out)
    want = torch.autograd.grad(ref_out, ref_inputs, upstream)
    for got in (fast, chunked, out):
        grads = torch.autograd.grad(got, (q, k, v), upstream)
        for label, a, e in zip("qkv", grads, want):
            torch.testing.assert_close(a, e, atol=1e-9, rtol=1e-8, msg=lambda m: f"grad {label}: {m}")


@pytest.mark.parametrize("name", NAMES)
def test_float32_and_half_inputs_close_to_reference(name):
    (q, k, v), kwargs, dense, positions = case_inputs("causal-full-mask")
    ref, _ = LINEAR_ATTENTIONS[name].reference_attention(q, k, v, params_for(name), dense, positions)
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 5e-2)):
        out = scored_attention(q.to(dtype), k.to(dtype), v.to(dtype), name, params_for(name, torch.float32), enable_gqa=True, **kwargs)
        assert out.dtype == dtype and torch.isfinite(out).all()
        torch.testing.assert_close(out.double(), ref, atol=tol, rtol=tol)


def test_gradcheck_causal_chunked():
    q, k, v = [t.requires_grad_(True) for t in qkv(batch=1, heads=2, kv_heads=2, q_len=7, kv_len=7, dim=3)]
    structure = LinearMask(torch.tensor([[False, True, True, True, True, True, True]]), 0)
    for spec in LINEAR_ATTENTIONS.values():
        params = {"m": torch.tensor([9.0, 30.0], dtype=torch.float64)}
        assert torch.autograd.gradcheck(lambda q, k, v: spec.attend(q, k, v, params, structure, chunk=3), (q, k, v))


def test_linear_is_neither_softmax_nor_unweighted_and_cos_reweighting_matters():
    (q, k, v), kwargs, _, _ = case_inputs("causal-full-mask", dtype=torch.float32)
    softmax = scored_attention(q * 3, k * 3, v, "softmax", enable_gqa=True, **kwargs)
    linear = scored_attention(q * 3, k * 3, v, "linear", enable_gqa=True, **kwargs)
    assert (linear - softmax).abs().max() > 0.05
    near = scored_attention(q, k, v, "cosformer", {"m": 9.0}, enable_gqa=True, **kwargs)
    far = scored_attention(q, k, v, "cosformer", {"m": 1e6}, enable_gqa=True, **kwargs)  # cos ~ 1: plain ReLU features
    assert (near - far).abs().max() > 0.05
    # the functional default for m is the sequence length (the paper's choice)
    torch.testing.assert_close(scored_attention(q, k, v, "cosformer", enable_gqa=True, **kwargs),
                               scored_attention(q, k, v, "cosformer", {"m": 9.0}, enable_gqa=True, **kwargs))


def test_mask_structure_is_derived_from_boolean_masks():
    keep = padding(2, 11)
    full = (causal(4, 11, 7)[None] & keep[:, None, :])[:, None]
    structure = linear_mask(full, 4, 11)
    assert structure.causal_offset == 7 and torch.equal(structure.key_padding, keep)
    assert torch.equal(structure.dense(4, 11, "cpu"), full)
    per_head = full.expand(2, 3, 4, 11)  # identical in every head: accepted
    assert linear_mask(per_head, 4, 11).causal_offset == 7
    bidirectional = linear_mask(keep[:, None, None, :].expand(2, 1, 4, 11), 4, 11)
    assert bidirectional.causal_offset is None and torch.equal(bidirectional.key_padding, keep)
    assert linear_mask(keep[:, None, None, :], 4, 11, is_causal=True).causal_offset == 0
    assert linear_mask(None, 4, 11) == LinearMask()


@pytest.mark.parametrize(
    "bad,match",
    [("window", "neither bidirectional nor causal"), ("random", "neither bidirectional nor causal"),
     ("heads", "differs between heads"), ("float", "boolean")],
)
def test_masks_linear_attention_cannot_honour_are_refused(bad, match):
    (q, k, v), _, _, _ = case_inputs("causal-full-mask", dtype=torch.float32)
    if bad == "window":  # sliding window: causal with a lower bound
        mask = causal(9, 9, 0) & ~causal(9, 9, -3)
    elif bad == "random":
        mask = torch.rand(2, 1, 9, 9, generator=torch.Generator().manual_seed(0)) > 0.5
    elif bad == "heads":
        mask = torch.stack([causal(9, 9, 0), causal(9, 9, 0).T, causal(9, 9, 0), causal(9, 9, 0)])[None]
    else:
        mask = torch.zeros(9, 9)
    with pytest.raises(ValueError, match=match):
        scored_attention(q, k, v, "linear", attn_mask=mask, enable_gqa=True)


def test_cosformer_refuses_inputs_longer_than_its_length_scale():
    (q, k, v), kwargs, _, _ = case_inputs("causal-full-mask", dtype=torch.float32)
    with pytest.raises(ValueError, match="cosformer_length"):
        scored_attention(q, k, v, "cosformer", {"m": 5.0}, enable_gqa=True, **kwargs)
    model = build("llama", "cosformer", max_position_embeddings=8)
    with pytest.raises(ValueError, match="cosformer_length"):
        model(input_ids=torch.randint(5, 50, (1, 12)))


def test_registry_backends_and_refusals():
    assert set(NAMES) == {"linear", "cosformer"} and not set(NAMES) & set(SCORING_FUNCTIONS)
    assert all(get_scoring_function(n).kind == "linear" for n in NAMES)
    assert all(ALL_SCORING_FUNCTIONS[n].kind == "rowwise" for n in SCORING_FUNCTIONS)
    for name in NAMES:
        assert supported_backends(name) == ["eager"] and supported_backends(name, needs_grad=False) == ["eager"]
        with pytest.raises(ValueError, match="not a row-wise function"):
            get_scoring_function(name).weights(torch.zeros(1, 1, 1, 2), None, {})
    assert supported_backends(["ssa", "softmax"]) == ["eager", "blockwise"]
    assert supported_backends(["ssa", "linear"]) == ["eager"]
    (q, k, v), _, _, _ = case_inputs("bidirectional", dtype=torch.float32)
    for backend in ("flex", "blockwise"):
        if BACKENDS[backend].refuses(get_scoring_function("softmax"), False, q.device, 0.0):
            continue  # this backend is unavailable here for any scoring function
        with pytest.raises(NotImplementedError, match="linear attention, which runs in linear time on backend 'eager'"):
            scored_attention(q, k, v, "linear", enable_gqa=True, backend=backend)
    assert ScoringParameters("cosformer", 4, cosformer_length=32)()["m"].tolist() == [32.0] * 4
    assert list(ScoringParameters("cosformer", 4, cosformer_length=32).parameters()) == [], "m is fixed (a buffer)"
    assert dict(ScoringParameters("linear", 4)()) == {}
    with pytest.raises(ValueError, match="cosformer_length"):
        validate_settings(resolve_settings(cosformer_length=0.0))


# --------------------------------------------------------------------------------------------------
# The functional mixture of scoring heads
# --------------------------------------------------------------------------------------------------

MIXTURE = ["softmax", "ssa", "linear", "cosformer", "ssa", "softmax"]
MIXTURE_PARAMS = {"ssa": {"b": torch.tensor([0.5, 2.0]), "n": 1.5}, "cosformer": {"m": 40.0}}


@pytest.mark.parametrize("causal_mask", [False, True])
def test_functional_mixture_equals_each_head_group_alone(causal_mask):
    q, k, v = [t.requires_grad_(True) for t in qkv(heads=6, kv_heads=3, q_len=8, kv_len=8, dtype=torch.float32)]
    mask = padding(2, 8)[:, None, None, :]
    out, weights = scored_attention(q, k, v, MIXTURE, MIXTURE_PARAMS, attn_mask=mask, is_causal=causal_mask,
                                    enable_gqa=True, return_weights=True)
    plain = scored_attention(q, k, v, MIXTURE, MIXTURE_PARAMS, attn_mask=mask, is_causal=causal_mask, enable_gqa=True)
    torch.testing.assert_close(plain, out)
    kv_index = torch.arange(6) // 2
    for name in dict.fromkeys(MIXTURE):
        heads = torch.tensor([h for h, n in enumerate(MIXTURE) if n == name])
        alone, alone_w = scored_attention(q[:, heads], k[:, kv_index[heads]], v[:, kv_index[heads]], name,
                                          MIXTURE_PARAMS.get(name), attn_mask=mask, is_causal=causal_mask, return_weights=True)
        torch.testing.assert_close(out[:, heads], alone, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(weights[:, heads], alone_w, atol=1e-6, rtol=1e-5)
    # SSA's per-head b reaches the right heads: swapping the two SSA heads' b values changes their outputs
    swapped = {**MIXTURE_PARAMS, "ssa": {"b": torch.tensor([2.0, 0.5]), "n": 1.5}}
    other = scored_attention(q, k, v, MIXTURE, swapped, attn_mask=mask, is_causal=causal_mask, enable_gqa=True)
    assert (other[:, [1, 4]] - plain[:, [1, 4]]).abs().max() > 1e-3
    torch.testing.assert_close(other[:, [0, 2, 3, 5]], plain[:, [0, 2, 3, 5]])
    plain.square().sum().backward()
    assert all(t.grad is not None and torch.isfinite(t.grad).all() for t in (q, k, v))
    # a [H]-shaped parameter tensor is indexed by the heads of each name
    full_b = {**MIXTURE_PARAMS, "ssa": {"b": torch.tensor([9.0, 0.5, 9.0, 9.0, 2.0, 9.0]), "n": 1.5}}
    torch.testing.assert_close(scored_attention(q, k, v, MIXTURE, full_b, attn_mask=mask, is_causal=causal_mask, enable_gqa=True), plain)


@pytest.mark.parametrize(
    "scoring,params,backend,error,match",
    [
        (MIXTURE, {"b": 1.0, "n": 1.5}, None, ValueError, "params maps each scoring name"),
        (MIXTURE[:5], MIXTURE_PARAMS, None, ValueError, "one scoring name per query head"),
        (["softmax"] * 5 + ["nope"], {}, None, ValueError, "Unknown scoring function 'nope'"),
        (MIXTURE, MIXTURE_PARAMS, "blockwise", NotImplementedError, "cannot run scoring 'linear'"),
        (["ssa"] * 6, {}, None, ValueError, "missing"),
    ],
)
def test_functional_mixture_refusals(scoring, params, backend, error, match):
    q, k, v = qkv(heads=6, kv_heads=3, q_len=5, kv_len=5, dtype=torch.float32)
    with pytest.raises(error, match=match):
        scored_attention(q, k, v, scoring, params, enable_gqa=True, backend=backend)


# --------------------------------------------------------------------------------------------------
# Inside the models
# --------------------------------------------------------------------------------------------------

MODEL_SCORINGS = ["linear", "cosformer", ["linear", "softmax", "cosformer", "ssa"]]
MODEL_CASES = [(f, s) for f in ("llama", "bert") for s in MODEL_SCORINGS]
MODEL_IDS = [f"{f}-{s if isinstance(s, str) else 'mixture'}" for f, s in MODEL_CASES]


def batch_for(model, length=11):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, model.config.vocab_size, (3, length), generator=g)
    mask = torch.ones_like(ids)
    if model.config.model_type == "ssa_llama":
        mask[0, :4] = 0  # left padding for the decoder
    else:
        mask[0, -4:] = 0
    return ids.masked_fill(mask == 0, model.config.pad_token_id), mask


def forward(model, ids, mask, **kw):
    if model.config.model_type == "ssa_llama":
        kw.setdefault("position_ids", (mask.cumsum(-1) - 1).clamp_min(0))
    return model(input_ids=ids, attention_mask=mask, **kw)


@pytest.mark.parametrize("family,scoring", MODEL_CASES, ids=MODEL_IDS)
def test_model_trains_pads_and_round_trips(family, scoring, tmp_path):
    model = build(family, scoring).train()
    ids, mask = batch_for(model)
    out = forward(model, ids, mask, labels=ids.masked_fill(mask == 0, -100))
    assert torch.isfinite(out.loss)
    out.loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    assert all(p.grad.abs().sum() > 0 for n, p in model.named_parameters() if n.endswith(("q_proj.weight", "query.weight")))
    model.eval()
    with torch.no_grad():
        batched = forward(model, ids, mask).logits
        keep = mask[0].bool()
        alone = forward(model, ids[:1, keep], mask[:1, keep]).logits
        torch.testing.assert_close(batched[0, keep], alone[0], atol=2e-4, rtol=1e-4)
        # attention maps (materialised weights) with the default implementation
        maps = forward(model, ids, mask, output_attentions=True).attentions
    assert maps[0].shape == (3, 4, ids.shape[1], ids.shape[1])
    assert (maps[0][0][..., ~mask[0].bool()] == 0).all(), "padded keys get exactly zero weight"
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["attention_scoring"] == scoring
    loaded = (AutoModelForCausalLM if family == "llama" else AutoModelForMaskedLM).from_pretrained(tmp_path).eval()
    assert loaded.config._attn_implementation == "ssa_auto"
    assert loaded.scoring_parameters() == model.scoring_parameters()
    with torch.no_grad():
        torch.testing.assert_close(forward(loaded, ids, mask).logits, batched, atol=0, rtol=0)


@pytest.mark.parametrize("scoring", MODEL_SCORINGS, ids=["linear", "cosformer", "mixture"])
def test_chunked_prefill_and_decoding_match_full_forward(scoring):
    model = build("llama", scoring)
    ids, mask = batch_for(model, length=14)
    position_ids = (mask.cumsum(-1) - 1).clamp_min(0)
    with torch.no_grad():
        full = forward(model, ids, mask).logits
        cache = DynamicCache(config=model.config)
        out = model(input_ids=ids[:, :6], attention_mask=mask[:, :6], position_ids=position_ids[:, :6], cache=cache, use_cache=True)
        steps = [out.logits]
        for t in range(6, ids.shape[1]):
            out = model(input_ids=ids[:, t : t + 1], attention_mask=mask[:, : t + 1], position_ids=position_ids[:, t : t + 1],
                        cache=cache, use_cache=True)
            steps.append(out.logits)
    real = mask.bool()
    torch.testing.assert_close(torch.cat(steps, dim=1)[real], full[real], atol=2e-4, rtol=1e-4)


def test_generate_batched_left_padding_equals_individual():
    tok = tiny_tokenizer()
    tok.padding_side = "left"
    model = build("llama", "cosformer")
    prompts = ["the cat sat", "every child likes some toys and"]
    batch = tok(prompts, return_tensors="pt", padding=True)
    with torch.no_grad():
        together = model.generate(**batch, max_new_tokens=6, do_sample=False, pad_token_id=tok.pad_token_id)
        for i, prompt in enumerate(prompts):
            alone = model.generate(**tok([prompt], return_tensors="pt"), max_new_tokens=6, do_sample=False, pad_token_id=tok.pad_token_id)
            assert together[i, -6:].tolist() == alone[0, -6:].tolist()
            # greedy decoding with the cache equals argmax of a full forward over the generated text
            logits = model(input_ids=alone).logits
            assert logits[0, -7:-1].argmax(-1).tolist() == alone[0, -6:].tolist()


@pytest.mark.slow  # a cold torch.compile takes ~1-2 min on 2 CPU cores
def test_torch_compile_forward_and_backward():
    # under compile the mask is read without data-dependent checks (no graph break); same loss and gradients
    model, twin = build("llama", "cosformer").train(), build("llama", "cosformer").train()
    ids, mask = batch_for(model)
    loss = torch.compile(model)(input_ids=ids, attention_mask=mask, labels=ids).loss
    loss.backward()
    eager_loss = twin(input_ids=ids, attention_mask=mask, labels=ids).loss
    eager_loss.backward()
    torch.testing.assert_close(loss, eager_loss, atol=1e-5, rtol=1e-5)
    for (name, p), (_, e) in zip(model.named_parameters(), twin.named_parameters()):
        torch.testing.assert_close(p.grad, e.grad, atol=1e-5, rtol=1e-4, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("implementation", ["ssa_flex", "ssa_blockwise", "flex_attention"])
def test_implementations_that_cannot_run_linear_attention_are_refused(implementation):
    config = llama_config(attention_scoring="linear")
    with pytest.raises(ValueError, match="cannot run attention_scoring"):
        AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation=implementation)


@pytest.mark.parametrize("requested,runs", [("sdpa", "ssa_auto"), ("eager", "ssa_eager")])
def test_standard_names_run_linear_attention(requested, runs):
    model = AutoModelForCausalLM.from_config(llama_config(attention_scoring="linear"), attn_implementation=requested)
    assert model.config._attn_implementation == runs
    with torch.no_grad():
        assert torch.isfinite(model(input_ids=torch.randint(5, 50, (2, 9))).logits).all()


@pytest.mark.parametrize("family", ["llama", "bert"])
def test_config_accepts_the_names_and_validates_cosformer_length(family):
    make = llama_config if family == "llama" else bert_config
    config = make(attention_scoring="cosformer")
    assert ScoringParameters("cosformer", 2, config).initial_values() == {"m": config.max_position_embeddings}
    assert ScoringParameters("cosformer", 2, make(attention_scoring="cosformer", cosformer_length=512)).initial_values() == {"m": 512}
    with pytest.raises(ValueError, match="cosformer_length"):
        make(attention_scoring="cosformer", cosformer_length=-1)
    with pytest.raises(ValueError, match="attention_scoring"):
        make(attention_scoring="linearr")


REMOTE_SCRIPT = textwrap.dedent(
    """
    import json, sys, torch
    sys.modules["ssa_hf"] = None  # ssa-hf must not be importable: the checkpoint alone has to suffice
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM
    for folder, kind in json.loads(sys.argv[1]):
        auto = AutoModelForCausalLM if kind == "llama" else AutoModelForMaskedLM
        model = auto.from_pretrained(folder, trust_remote_code=True).eval()
        assert "transformers_modules" in type(model).__module__, type(model).__module__
        data = torch.load(folder + "/inputs.pt")
        with torch.no_grad():
            logits = model(input_ids=data["ids"], attention_mask=data["mask"]).logits
        torch.save({"logits": logits}, folder + "/remote.pt")
    """
)


def test_remote_code_loads_linear_models_without_ssa_hf(tmp_path):
    cases = []
    for family, scoring in [("llama", "cosformer"), ("bert", ["linear", "softmax", "cosformer", "ssa"])]:
        model = build(family, scoring)
        folder = tmp_path / f"{family}-{len(cases)}"
        model.save_pretrained(folder)
        assert (folder / "linear.py").exists(), "linear.py must be copied next to the weights"
        ids, mask = batch_for(model)
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=mask).logits
        torch.save({"ids": ids, "mask": mask, "logits": logits}, folder / "inputs.pt")
        cases.append((str(folder), family))
    env = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "HF_HOME": str(tmp_path / "hf_home")}
    result = subprocess.run([sys.executable, "-c", REMOTE_SCRIPT, json.dumps(cases)], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    for folder, _ in cases:
        torch.testing.assert_close(torch.load(folder + "/remote.pt")["logits"], torch.load(folder + "/inputs.pt")["logits"], atol=0, rtol=0)
