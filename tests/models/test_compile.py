"""torch.compile(fullgraph=True) and torch.export of both model families with the default attention
(`ssa_auto`, the fused kernel as the custom op ssa_hf::attention_forward_v2/backward_v2) give the eager results.

Compiling costs seconds per graph here, so each test compiles once: training graphs (forward and backward) on
aot_eager, inference on inductor (llama in the default run, bert among the slow tests) and torch.export; a
training step on the default compiler (inductor) for SSA (default run) and CosFormer (slow)."""

import pytest
import torch

from tests.models.tiny import build

FAMILIES = ["llama", "bert"]


def _inputs(family):
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 100, (2, 12), generator=gen)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # a padded row: the mask reaches the kernel as a tensor, not as is_causal
    kwargs = {"input_ids": ids, "attention_mask": mask}
    if family == "llama":
        kwargs["use_cache"] = False
    return kwargs


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("family", FAMILIES)
def test_fullgraph_training_step_matches_eager(family):
    model = build(family).train()
    assert model.config._attn_implementation == "ssa_auto"
    kwargs = _inputs(family)
    labels = kwargs["input_ids"].masked_fill(kwargs["attention_mask"] == 0, -100)
    loss = model(**kwargs, labels=labels).loss
    loss.backward()
    want = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    assert any("scoring" in name for name in want), "the SSA parameters get no gradient"
    model.zero_grad()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    got = compiled(**kwargs, labels=labels).loss
    got.backward()
    torch.testing.assert_close(got, loss, rtol=1e-6, atol=1e-6)
    for name, p in model.named_parameters():
        if name in want:
            torch.testing.assert_close(p.grad, want[name], rtol=1e-5, atol=1e-6, msg=name)


def _inductor_logits_match(family):
    model = build(family).eval()
    kwargs = _inputs(family)
    with torch.no_grad():
        want = model(**kwargs).logits
        got = torch.compile(model, fullgraph=True, backend="inductor")(**kwargs).logits
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_inductor_inference_matches_eager_llama():
    _inductor_logits_match("llama")


@pytest.mark.slow
def test_inductor_inference_matches_eager_bert():
    _inductor_logits_match("bert")


@pytest.mark.parametrize("family", FAMILIES)
def test_export_matches_eager_and_contains_the_ssa_op(family):
    model = build(family).eval()
    kwargs = _inputs(family)
    program = torch.export.export(model, (), kwargs)
    assert "ssa_hf.attention_forward_v2" in str(program.graph), "the exported graph does not run the SSA kernel"
    with torch.no_grad():
        want = model(**kwargs).logits
    torch.testing.assert_close(program.module()(**kwargs).logits, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("scoring", ["ssa", pytest.param("cosformer", marks=pytest.mark.slow)])
def test_default_compile_training_step_matches_eager(scoring):
    """torch.compile(model) with its default backend: same loss and gradients as eager. For linear attention the
    mask is read without data-dependent checks under compile (no graph break); a cold compile of it takes
    ~1-2 min on 2 CPU cores, hence slow."""
    model, twin = build("llama", scoring).train(), build("llama", scoring).train()
    kwargs = _inputs("llama")
    labels = kwargs["input_ids"]
    loss = torch.compile(model)(**kwargs, labels=labels).loss
    loss.backward()
    eager_loss = twin(**kwargs, labels=labels).loss
    eager_loss.backward()
    torch.testing.assert_close(loss, eager_loss, atol=1e-5, rtol=1e-5)
    assert all(p.grad is not None for n, p in model.named_parameters() if ".scoring." in n)
    for (name, p), (_, e) in zip(model.named_parameters(), twin.named_parameters()):
        torch.testing.assert_close(p.grad, e.grad, atol=1e-5, rtol=1e-4, msg=lambda m, name=name: f"{name}: {m}")


def test_bfloat16_model_compiles_and_exports_with_the_native_op():
    """A bf16 model (the kernel reads and writes bf16 itself, forward and backward): a fullgraph aot_eager
    training step gives eager's loss and gradients, and torch.export keeps the SSA op with bf16 in and out."""
    model = build("llama").to(torch.bfloat16).train()
    kwargs = _inputs("llama")
    labels = kwargs["input_ids"].masked_fill(kwargs["attention_mask"] == 0, -100)
    loss = model(**kwargs, labels=labels).loss
    loss.backward()
    want = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    got = torch.compile(model, fullgraph=True, backend="aot_eager")(**kwargs, labels=labels).loss
    got.backward()
    torch.testing.assert_close(got, loss, rtol=1e-2, atol=1e-2)
    for name, p in model.named_parameters():
        if name in want:
            assert p.grad.dtype == torch.bfloat16
            torch.testing.assert_close(p.grad.float(), want[name].float(), rtol=2e-2, atol=1e-2, msg=name)
    model.eval()
    program = torch.export.export(model, (), kwargs)
    assert "ssa_hf.attention_forward_v2" in str(program.graph)
    with torch.no_grad():
        logits = model(**kwargs).logits
    assert logits.dtype == torch.bfloat16
    torch.testing.assert_close(program.module()(**kwargs).logits.float(), logits.float(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("as_tensors", [False, True], ids=["float_b_n", "tensor_b_n"])
def test_functional_scored_attention_compiles_fullgraph(as_tensors):
    """The public functional API traces whole (its checks and its caches of parameter tensors stay out of the
    graph) and gives the eager result, with b and n as floats or as tensors that get gradients."""
    from ssa_hf.models.attention import scored_attention

    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 4, n, 16, generator=gen) for n in (3, 5, 5))
    b = torch.tensor([0.7, 1.0, 1.3, 0.9], requires_grad=True) if as_tensors else 0.7
    n = torch.tensor([1.5, 1.2, 2.0, 1.5], requires_grad=True) if as_tensors else 1.5

    def attend(q, k, v, b, n):
        return scored_attention(q, k, v, "ssa", {"b": b, "n": n}, backend="eager")

    compiled = torch.compile(attend, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(q, k, v, b, n), attend(q, k, v, b, n))
    if as_tensors:
        got = torch.autograd.grad(compiled(q, k, v, b, n).sum(), (b, n))
        want = torch.autograd.grad(attend(q, k, v, b, n).sum(), (b, n))
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)


def test_bf16_autocast_compiles_to_the_bf16_kernel():
    """Under bf16 autocast a compiled call casts q, k and v as the eager call does (the op then runs in bf16), with
    the eager result and gradients."""
    from ssa_hf.models.blockwise import blockwise_attention

    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 4, 16, 8, generator=gen, requires_grad=True) for _ in range(3))
    b = torch.full((4,), 0.6, requires_grad=True)

    def attend(q, k, v, b):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return blockwise_attention(q, k, v, b, 1.5, is_causal=True)

    got = torch.compile(attend, backend="aot_eager", fullgraph=True)(q, k, v, b)
    want = attend(q, k, v, b)
    assert got.dtype == want.dtype == torch.bfloat16 and torch.equal(got, want)
    grads = torch.autograd.grad(got.float().sum(), (q, k, v, b))
    for g, w in zip(grads, torch.autograd.grad(want.float().sum(), (q, k, v, b))):
        torch.testing.assert_close(g, w)
