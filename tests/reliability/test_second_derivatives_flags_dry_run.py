"""Results that were silently wrong and are now right or refused: second derivatives through the blockwise kernel
(None under allow_unused), a non-bool `is_causal` (the string "False" ran causal attention), a `push --dry-run`
that rewrote the folder's README.md."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ssa_hf.models.attention import scored_attention, ssa_attention
from ssa_hf.models.blockwise import blockwise_attention


def _inputs(dtype=torch.float64):
    torch.manual_seed(0)
    return [torch.randn(1, 2, 5, 4, dtype=dtype, requires_grad=True) for _ in range(3)]


def test_second_derivatives_on_the_eager_backend_pass_gradgradcheck():
    q, k, v = _inputs()
    b = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(
        lambda q, k, v, b: ssa_attention(q, k, v, b=b, n=1.5, is_causal=True, backend="eager"), (q, k, v, b))


@pytest.mark.parametrize("backend", ["blockwise", None])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_second_derivatives_through_the_blockwise_kernel_raise_naming_the_eager_backend(backend, dtype):
    # before: the gradients had no history, so autograd.grad(..., allow_unused=True) answered None for every input
    q, k, v = _inputs()
    out = ssa_attention(q.to(dtype), k.to(dtype), v.to(dtype), b=1.0, n=1.5, is_causal=True, backend=backend)
    grad_q, = torch.autograd.grad(out.sum() ** 2, (q,), create_graph=True)
    with pytest.raises(RuntimeError, match='backend="eager"'):
        torch.autograd.grad(grad_q.sum(), (q, k, v), allow_unused=True)
    with pytest.raises(RuntimeError, match='attn_implementation="ssa_eager"'):
        torch.autograd.gradgradcheck(lambda q, k, v: ssa_attention(q, k, v, 1.0, 1.5, backend=backend), (q, k, v))


def test_second_derivatives_through_the_custom_op_raise_too():
    """torch.compile and torch.export run the registered op (its register_autograd), not the eager Function."""
    from ssa_hf.models.blockwise import attention_forward

    q, k, v = _inputs()
    b = torch.ones(2, dtype=torch.float64, requires_grad=True)
    n = torch.full((2,), 1.5, dtype=torch.float64)
    out = attention_forward(q, k, v, b, n, None, True, 0.5, 256, 256)[0]
    grad_q, grad_b = torch.autograd.grad(out.sum() ** 2, (q, b), create_graph=True)
    with pytest.raises(RuntimeError, match="second derivatives"):
        torch.autograd.grad(grad_q.sum() + grad_b.sum(), (q, k, v, b), allow_unused=True)


def test_first_derivatives_with_create_graph_still_work_on_the_blockwise_kernel():
    q, k, v = _inputs()
    b = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    grads = torch.autograd.grad(ssa_attention(q, k, v, b, 1.5, backend="blockwise").sum(), (q, k, v, b),
                                create_graph=True)
    expected = torch.autograd.grad(ssa_attention(q, k, v, b, 1.5, backend="eager").sum(), (q, k, v, b))
    for got, want in zip(grads, expected):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("flag", ["False", "True", 0, 1, None, torch.tensor(False)], ids=repr)
@pytest.mark.parametrize("entry", ["ssa_attention", "scored_attention", "blockwise_attention"])
def test_is_causal_must_be_a_bool(entry, flag):
    # before: is_causal="False" ran causal attention (SDPA itself raises a TypeError for a non-bool)
    q, k, v = (x.detach() for x in _inputs(torch.float32))
    with pytest.raises(TypeError, match="is_causal must be True or False"):
        if entry == "ssa_attention":
            ssa_attention(q, k, v, 1.0, 1.5, is_causal=flag)
        elif entry == "scored_attention":
            scored_attention(q, k, v, "softmax", is_causal=flag)
        else:
            blockwise_attention(q, k, v, 1.0, 1.5, is_causal=flag)


@pytest.mark.parametrize("flag", [True, False])
def test_numpy_bools_are_bools(flag):
    q, k, v = (x.detach() for x in _inputs(torch.float32))
    torch.testing.assert_close(ssa_attention(q, k, v, 1.0, 1.5, is_causal=np.bool_(flag)),
                               ssa_attention(q, k, v, 1.0, 1.5, is_causal=flag))


@pytest.mark.parametrize("options", [["--license", "mit"], ["--refresh-card"], ["--refresh-code"],
                                     ["--base-model", "org/base", "--refresh-code"]], ids=" ".join)
def test_push_dry_run_changes_nothing_in_the_folder(options, tmp_path, capsys):
    # before: card options (or --refresh-card) rewrote README.md and ssa_hf_card.json, --refresh-code the *.py files
    from ssa_hf.cli import main
    from ssa_hf.hub import save_checkpoint_folder

    from ..evaluation import fixtures as eval_fixtures

    tokenizer = eval_fixtures.tokenizer(masked=False)
    folder = save_checkpoint_folder(eval_fixtures.causal_lm(tokenizer), tmp_path / "model", tokenizer=tokenizer)
    if "--refresh-code" in options:  # a changed module, which --refresh-code replaces
        with open(folder / "scoring.py", "a") as handle:
            handle.write("\n# an edit\n")
    with open(folder / "README.md", "a") as handle:  # the user's own edit of the card
        handle.write("\nmy own notes\n")
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.iterdir()}
    rc = main(["push", str(folder), "someone/x", "--dry-run", *options])
    out = capsys.readouterr().out
    assert rc == 0 and "dry run: would upload" in out and "README.md" in out
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.iterdir()} == before
