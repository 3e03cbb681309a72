"""Continuous batching of ssa-hf models: the paged SSA attention (ssa_hf/models/paged.py) against a float64 oracle
over transformers' packed paged-cache layout, generate_batch / ContinuousBatchingManager against per-request greedy
generate (requests of different lengths joining and leaving mid-batch, GQA), a stock softmax Llama beside an SSA
model, and the refusals of transformers' softmax-only paged and flash kernels."""

from __future__ import annotations

import inspect
import time
import types

import pytest
import torch
from transformers import ContinuousBatchingConfig, GenerationConfig, LlamaConfig, LlamaForCausalLM

from ssa_hf import SSALlamaForCausalLM
from ssa_hf.models import paged
from ssa_hf.models.paged import PAGED_IMPLEMENTATIONS, make_paged_attention
from tests.models import oracle
from tests.models.tiny import llama_config

# (past keys, new tokens) per request of one packed step: decoding requests of different lengths, a fresh prefill,
# a prefill chunk after an earlier chunk, and a padding request (transformers pads batches for static shapes)
REQUESTS = [(5, 1), (0, 4), (4, 3), (0, 0), (9, 1), (0, 1), (2, 1)]


def _tiny_ssa(dtype=torch.float64, **overrides) -> SSALlamaForCausalLM:
    torch.manual_seed(0)
    model = SSALlamaForCausalLM(llama_config(**overrides)).to(dtype).eval()
    return model


def _packed_step(heads: int, kv_heads: int, head_dim: int, requests, dtype=torch.float64, scale_up: float = 4.0):
    """A packed call as transformers' paged cache makes it: queries [1, H, sum new, D], each request's keys (past,
    then new) [1, Hkv, sum (past + new), D], and the cumulative lengths."""
    cu_q, cu_k = [0], [0]
    for past, new in requests:
        cu_q.append(cu_q[-1] + new)
        cu_k.append(cu_k[-1] + (past + new if new else 0))
    q = torch.randn(1, heads, cu_q[-1], head_dim, dtype=dtype) * scale_up  # large scores: SSA != softmax
    k = torch.randn(1, kv_heads, cu_k[-1], head_dim, dtype=dtype) * scale_up
    v = torch.randn(1, kv_heads, cu_k[-1], head_dim, dtype=dtype)
    return q, k, v, torch.tensor(cu_q, dtype=torch.int32), torch.tensor(cu_k, dtype=torch.int32)


def _oracle_packed(q, k, v, cu_q, cu_k, scoring, params, scale):
    """Each request's new tokens against its own keys, bottom-right causal, in float64: [1, Q, H, D]."""
    out = torch.zeros(1, q.shape[2], q.shape[1], q.shape[3], dtype=torch.float64)
    for i in range(len(cu_q) - 1):
        q0, q1, k0, k1 = int(cu_q[i]), int(cu_q[i + 1]), int(cu_k[i]), int(cu_k[i + 1])
        if q1 == q0:
            continue
        allowed = torch.ones(q1 - q0, k1 - k0, dtype=torch.bool).tril((k1 - k0) - (q1 - q0))
        o, _ = oracle.attention(q[:, :, q0:q1], k[:, :, k0:k1], v[:, :, k0:k1], scoring, params, attn_mask=allowed,
                                scale=scale)
        out[:, q0:q1] = o.transpose(1, 2)
    return out


@pytest.fixture(params=["packed", "per_request"])
def paged_route(request, monkeypatch):
    """Both routes of a packed step: one call with a block mask (small steps) and per-request calls (large ones)."""
    monkeypatch.setattr(paged, "PACKED_BUDGET", 1 << 40 if request.param == "packed" else 0)
    return request.param


@pytest.mark.parametrize("implementation", ["ssa_paged", "ssa_paged_eager", "ssa_paged_blockwise"])
def test_paged_attention_equals_float64_oracle_over_the_packed_layout(implementation, paged_route):
    model = _tiny_ssa(ssa_b_init=0.7, ssa_n_init=1.8, scoring_granularity="head")
    module = model.model.layers[0].self_attn  # 4 query heads, 2 key/value heads (GQA)
    with torch.no_grad():  # distinct values per head
        for name, param in module.scoring.params.items():
            param.set_value(torch.tensor([1.2, 1.6, 2.1, 2.8] if name == "n" else [0.5, 0.9, 1.3, 2.0]))
    params = {k: v.detach().double() for k, v in module.scoring().items()}
    q, k, v, cu_q, cu_k = _packed_step(4, 2, 8, REQUESTS)
    attention = make_paged_attention(PAGED_IMPLEMENTATIONS[implementation])
    with torch.no_grad():
        out, weights = attention(module, q, k, v, None, scaling=8 ** -0.5, cu_seq_lens_q=cu_q, cu_seq_lens_k=cu_k,
                                 max_length_q=4, max_length_k=10)
    expected = _oracle_packed(q, k, v, cu_q, cu_k, "ssa", params, 8 ** -0.5)
    assert weights is None and out.shape == expected.shape
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)
    softmax = _oracle_packed(q, k, v, cu_q, cu_k, "softmax", {}, 8 ** -0.5)
    assert (out - softmax).abs().max() > 1e-2  # the check tells SSA from softmax at these scores
    # one query that saw another request's keys would differ too: attention over the whole packed row
    everything = oracle.attention(q, k, v, "ssa", params, scale=8 ** -0.5)[0].transpose(1, 2)
    assert (out - everything).abs().max() > 1e-2


def test_padding_rows_and_keys_after_the_last_request_are_ignored(paged_route):
    # transformers may pad the packed row for static shapes: queries and keys past the last request's end
    model = _tiny_ssa(scoring_granularity="head")
    module = model.model.layers[0].self_attn
    params = {k: v.detach().double() for k, v in module.scoring().items()}
    q, k, v, cu_q, cu_k = _packed_step(4, 2, 8, REQUESTS)
    pad = lambda x, n: torch.cat([x, torch.randn(*x.shape[:2], n, x.shape[3], dtype=x.dtype) * 50], dim=2)
    attention = make_paged_attention(None)
    with torch.no_grad():
        out, _ = attention(module, pad(q, 2), pad(k, 3), pad(v, 3), None, scaling=8 ** -0.5, cu_seq_lens_q=cu_q,
                           cu_seq_lens_k=cu_k, max_length_q=4, max_length_k=10)
    expected = _oracle_packed(q, k, v, cu_q, cu_k, "ssa", params, 8 ** -0.5)
    torch.testing.assert_close(out[:, : q.shape[2]], expected, rtol=1e-10, atol=1e-10)
    assert out.shape[1] == q.shape[2] + 2 and torch.all(out[:, q.shape[2]:] == 0)


@pytest.mark.parametrize("attributes, message", [({"is_causal": False}, "causal decoders only"),
                                                 ({"is_causal": True, "sliding_window": 4}, "sliding-window")])
def test_a_packed_call_refuses_what_continuous_batching_cannot_run(attributes, message):
    module = types.SimpleNamespace(**attributes)  # an encoder's or a sliding-window layer's attention
    q, k, v, cu_q, cu_k = _packed_step(4, 2, 8, REQUESTS)
    with pytest.raises(ValueError, match=message):
        make_paged_attention(None)(module, q, k, v, None, cu_seq_lens_q=cu_q, cu_seq_lens_k=cu_k)


def test_keys_without_their_past_are_refused():
    # transformers 5.17 handed attention the new keys alone, with cu_seq_lens_k counting the past too
    model = _tiny_ssa()
    q, k, v, cu_q, cu_k = _packed_step(4, 2, 8, REQUESTS)
    with pytest.raises(ValueError, match="without the past"):
        make_paged_attention(None)(model.model.layers[0].self_attn, q, k[:, :, : q.shape[2]], v[:, :, : q.shape[2]],
                                   None, cu_seq_lens_q=cu_q, cu_seq_lens_k=cu_k)


def test_transformers_older_than_the_tested_layout_is_refused(monkeypatch):
    import transformers

    monkeypatch.setattr(transformers, "__version__", "5.17.0")
    model = _tiny_ssa()
    generation = GenerationConfig(do_sample=False, eos_token_id=-1, pad_token_id=model.config.pad_token_id)
    with pytest.raises(ValueError, match=r"needs transformers >= 5\.25 \(found 5\.17\.0\)"):
        model.init_continuous_batching(generation_config=generation)
    monkeypatch.setattr(transformers, "__version__", "5.25.0")
    assert paged.continuous_batching_problem() is None


def test_paged_attention_without_packed_layout_is_the_models_attention():
    model = _tiny_ssa()
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        expected = model(ids).logits
        model.set_attn_implementation("ssa_paged")
        assert model.config._attn_implementation == "ssa_paged"
        torch.testing.assert_close(model(ids).logits, expected, rtol=0, atol=0)


def _greedy(model, prompt, new_tokens):
    config = GenerationConfig(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                              pad_token_id=model.config.pad_token_id)
    with torch.no_grad():
        return model.generate(torch.tensor([prompt]), generation_config=config)[0, len(prompt):].tolist()


# the tokens per cache page: `page_size` since transformers 5.2x, `block_size` in 5.17 (the oldest pyproject allows)
PAGE_SIZE = "page_size" if "page_size" in inspect.signature(ContinuousBatchingConfig.__init__).parameters else "block_size"


def _batching_config(**changes):
    # small pages and a small token budget: prompts are prefilled in chunks, several requests share each step
    return ContinuousBatchingConfig(**{"num_blocks": 32, PAGE_SIZE: 4, "max_batch_tokens": 8, **changes})


def _collect(manager, request_ids, deadline, results):
    while set(request_ids) - set(results) and time.monotonic() < deadline:
        result = manager.get_result(timeout=0.5)
        if result is not None and result.is_finished():
            results[result.request_id] = result
    return results


def test_continuous_batching_equals_greedy_generate_with_requests_joining_and_leaving(paged_route):
    model = _tiny_ssa()  # float64, GQA
    generation = GenerationConfig(do_sample=False, eos_token_id=-1, pad_token_id=model.config.pad_token_id)
    first = {"a": ([5, 6, 7], 2), "b": ([9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19], 12), "c": ([30], 7)}
    later = {"d": ([40, 41, 42, 43, 44, 45], 5), "e": ([50, 51], 9)}
    deadline = time.monotonic() + 60
    manager = model.init_continuous_batching(generation_config=generation, continuous_batching_config=_batching_config())
    manager.start()
    try:
        assert model.config._attn_implementation == "ssa_paged"
        for rid, (prompt, new) in first.items():
            manager.add_request(prompt, request_id=rid, max_new_tokens=new)
        results = _collect(manager, ["a"], deadline, {})  # "a" leaves while "b" and "c" are still decoding
        assert not {"b", "c"} <= set(results)
        for rid, (prompt, new) in later.items():  # and these join them
            manager.add_request(prompt, request_id=rid, max_new_tokens=new)
        _collect(manager, [*first, *later], deadline, results)
    finally:
        manager.stop(block=True, timeout=10)
    assert model.config._attn_implementation == "ssa_auto"  # restored when the manager stops
    for rid, (prompt, new) in {**first, **later}.items():
        assert results[rid].error is None, results[rid].error
        assert results[rid].generated_tokens == _greedy(model, prompt, new), rid


def test_generate_batch_and_paged_cache_implementation_run_ssa():
    model = _tiny_ssa(torch.float32)
    prompts = [[5, 6, 7, 8, 9, 10], [11, 12], [13, 14, 15, 16]]
    generation = GenerationConfig(max_new_tokens=5, do_sample=False, eos_token_id=-1,
                                  pad_token_id=model.config.pad_token_id)
    outputs = model.generate_batch(prompts, generation_config=generation, continuous_batching_config=_batching_config(),
                                   warmup=False)
    assert [o.generated_tokens for o in outputs.values()] == [_greedy(model, p, 5) for p in prompts]
    with torch.no_grad():
        paged = model.generate(torch.tensor([prompts[0]]), generation_config=generation, cache_implementation="paged",
                               continuous_batching_config=_batching_config())
    assert torch.as_tensor(paged).reshape(-1).tolist() == prompts[0] + _greedy(model, prompts[0], 5)


def _stock_llama(config) -> LlamaForCausalLM:
    stock_config = LlamaConfig(**{k: v for k, v in config.to_dict().items() if k in LlamaConfig().to_dict()})
    torch.manual_seed(1)
    model = LlamaForCausalLM(stock_config).eval()
    model.set_attn_implementation("sdpa")
    return model


def test_stock_softmax_llama_beside_an_ssa_model_keeps_softmax():
    from transformers.generation.continuous_batching import ContinuousBatchingManager
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    ssa = _tiny_ssa(torch.float32)
    stock = _stock_llama(ssa.config)
    generation = GenerationConfig(max_new_tokens=4, do_sample=False, eos_token_id=-1, pad_token_id=0)
    prompts = [[5, 6, 7], [8, 9, 10, 11, 12]]
    ssa_out = ssa.generate_batch(prompts, generation_config=generation, continuous_batching_config=_batching_config(),
                                 warmup=False)
    stock_manager = stock.init_continuous_batching(generation_config=generation,
                                                   continuous_batching_config=_batching_config())
    try:
        assert type(stock_manager) is ContinuousBatchingManager  # transformers' own, its own switch
        assert stock.config._attn_implementation == "sdpa"
        assert ALL_ATTENTION_FUNCTIONS["sdpa"] is sdpa_attention_forward
        assert ALL_ATTENTION_FUNCTIONS["paged|eager"].__module__ == "transformers.integrations.eager_paged"
    finally:
        stock_manager.destroy()
    stock_out = stock.generate_batch(prompts, generation_config=generation,
                                     continuous_batching_config=_batching_config(), warmup=False)
    assert [o.generated_tokens for o in stock_out.values()] == [_greedy(stock, p, 4) for p in prompts]
    assert [o.generated_tokens for o in ssa_out.values()] == [_greedy(ssa, p, 4) for p in prompts]


def test_half_precision_never_switches_an_ssa_model_to_flash(monkeypatch):
    import transformers.generation.continuous_batching.continuous_api as api

    # flash "installed": transformers' switch would take it for a half-precision model of a class supporting flash
    monkeypatch.setattr(api, "is_flash_attn_2_available", lambda *a, **k: True)
    monkeypatch.setattr(api, "is_flash_attn_3_available", lambda *a, **k: True)
    model = _tiny_ssa(torch.bfloat16)
    assert model._supports_flash_attn is False
    monkeypatch.setattr(type(model), "_supports_flash_attn", True)  # even if a class claimed it
    manager = model.init_continuous_batching(generation_config=GenerationConfig(max_new_tokens=2, do_sample=False),
                                             continuous_batching_config=_batching_config())
    try:
        assert model.config._attn_implementation == "ssa_paged"
    finally:
        manager.destroy()


@pytest.mark.parametrize("name", ["paged|eager", "flash_attention_2", "flash_attention_3", "paged|flash_attention_2"])
def test_softmax_only_paged_and_flash_kernels_are_refused_for_ssa(name):
    model = _tiny_ssa(torch.float32)
    with pytest.raises(ValueError, match="softmax attention and cannot run attention_scoring='ssa'.*ssa_paged"):
        model.set_attn_implementation(name)
    with pytest.raises(ValueError, match="cannot run attention_scoring='ssa'"):
        SSALlamaForCausalLM._from_config(llama_config(), attn_implementation=name)
    assert model.config._attn_implementation == "ssa_auto"


def test_paged_sdpa_runs_ssa_and_a_paged_backend_that_cannot_run_the_scoring_is_refused():
    model = _tiny_ssa(torch.float32)
    model.set_attn_implementation("paged|sdpa")  # transformers drops the prefix: sdpa, which ssa-hf maps to its own
    assert model.config._attn_implementation == "ssa_auto"
    sparse = _tiny_ssa(torch.float32, attention_scoring="sparsemax")
    with pytest.raises(ValueError, match="ssa_paged_blockwise.*cannot run attention_scoring='sparsemax'"):
        sparse.set_attn_implementation("ssa_paged_blockwise")
    sparse.set_attn_implementation("ssa_paged_eager")  # eager runs every scoring function
    assert sparse.config._attn_implementation == "ssa_paged_eager"


def test_gpt2_family_batches_as_it_generates():
    from ssa_hf import SSAGPT2LMHeadModel
    from tests.models.tiny import gpt2_config

    torch.manual_seed(0)
    model = SSAGPT2LMHeadModel(gpt2_config()).double().eval()
    prompts = [[5, 6, 7, 8, 9, 10, 11, 12, 13, 14], [9, 10], [20, 21, 22]]
    generation = GenerationConfig(max_new_tokens=5, do_sample=False, eos_token_id=-1, pad_token_id=0)
    outputs = model.generate_batch(prompts, generation_config=generation, continuous_batching_config=_batching_config(),
                                   warmup=False)
    assert [o.generated_tokens for o in outputs.values()] == [_greedy(model, p, 5) for p in prompts]


@pytest.mark.parametrize("scoring", ["cosformer", ["ssa", "ssa", "softmax", "sparsemax"]], ids=["cosformer", "mixture"])
def test_other_scoring_functions_batch_as_they_generate(scoring):
    """Linear attention decodes request by request (its call defaults depend on the key length); a mixture of
    scoring heads shares the padded decoding call."""
    model = _tiny_ssa(attention_scoring=scoring)
    prompts = [[5, 6, 7, 8, 9, 10, 11, 12, 13, 14], [9, 10], [20, 21, 22]]
    generation = GenerationConfig(max_new_tokens=5, do_sample=False, eos_token_id=-1, pad_token_id=0)
    outputs = model.generate_batch(prompts, generation_config=generation, continuous_batching_config=_batching_config(),
                                   warmup=False)
    assert [o.generated_tokens for o in outputs.values()] == [_greedy(model, p, 5) for p in prompts]
