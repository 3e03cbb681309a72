"""FlexAttention paths: scoring functions that are a modification of softmax scores, as `score_mod`s.

FlexAttention computes softmax(score_mod(q.k * scale)) with a fused kernel, so every registry entry that
has `logits` (softmax, temperature, ssa, ssmax, ...) runs on it, with a score_mod built from those logits, and
softmax_1 too: its extra zero logit is one appended key whose score is forced to 0 and whose value is 0.

torch 2.13 runs FlexAttention on CPU for inference only (and `return_lse` is not supported there); on CUDA
it has a backward, with gradients flowing to the captured per-head parameter tensors.
Part of the remote-code unit: imports only torch and siblings.
"""

from __future__ import annotations

import logging
import os
import warnings
from functools import lru_cache

import torch
from torch import Tensor

from .scoring import ScoringFunction, identity_logits

logger = logging.getLogger("ssa_hf")


def flex_available() -> bool:
    try:
        from torch.nn.attention.flex_attention import flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


@lru_cache(maxsize=None)
def _compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


# torch 2.13's compiled CPU FlexAttention gives wrong values or NaN, varying from run to run, for head dims
# below 32 (measured at 8 and 16 against eager; 24 to 128 matched): such calls run uncompiled (the unfused
# reference path: correct, with the memory of the eager backend).
CPU_COMPILED_MIN_HEAD_DIM = 32
_logged_uncompiled: set = set()


def _flex_fn(compile: bool | None, device: torch.device, head_dim: int):
    from torch.nn.attention.flex_attention import flex_attention

    if compile is None:
        compile = os.environ.get("SSA_HF_FLEX_COMPILE", "1") != "0"
    small_on_cpu = device.type == "cpu" and head_dim < CPU_COMPILED_MIN_HEAD_DIM
    if small_on_cpu and torch.compiler.is_compiling():
        # inside a compiled model the kernel would be compiled whatever this function returns
        raise NotImplementedError(
            f"FlexAttention on CPU with head_dim {head_dim} < {CPU_COMPILED_MIN_HEAD_DIM} gives wrong results when "
            f"compiled (torch's CPU kernel); under torch.compile use attn_implementation 'ssa_blockwise' or "
            f"'ssa_eager' (backend 'blockwise' or 'eager'), or run without torch.compile"
        )
    if compile and small_on_cpu:
        if head_dim not in _logged_uncompiled:
            _logged_uncompiled.add(head_dim)
            logger.info(
                "ssa-hf flex: head_dim %d < %d on CPU runs uncompiled (torch's compiled CPU kernel is wrong there)",
                head_dim, CPU_COMPILED_MIN_HEAD_DIM,
            )
        compile = False
    return _compiled_flex() if compile else flex_attention


@lru_cache(maxsize=32)
def _causal_block_mask(q_len: int, kv_len: int, zero_key: int | None, device: torch.device):
    """Top-left causal (query i sees keys j <= i; softmax_1's appended zero key always visible)."""
    from torch.nn.attention.flex_attention import create_block_mask

    if zero_key is None:
        def mask_mod(b, h, q_idx, kv_idx):
            return q_idx >= kv_idx
    else:
        def mask_mod(b, h, q_idx, kv_idx):
            return (q_idx >= kv_idx) | (kv_idx == zero_key)

    return create_block_mask(mask_mod, None, None, q_len, kv_len, device=device)


def _head_indexed(value: Tensor, heads: int, device: torch.device) -> Tensor:
    """A parameter as a 1-D float32 tensor [heads] with its own storage, indexed by head in the score_mod.

    Scalars and per-layer values arrive broadcast (a 0-dim tensor, or a stride-0 `expand` of one value); the
    CPU code generator of torch 2.13 fails on a captured buffer without storage of its own ("All the buffers
    in the score and mask subgraph should be in kernel_group.args.input_buffers"), so materialise it.
    """
    value = value.to(device=device, dtype=torch.float32).reshape(-1)
    return value.expand(heads).contiguous() if value.numel() == 1 else value.contiguous()


def make_score_mod(spec: ScoringFunction, params: dict[str, Tensor], row_log_count: Tensor | None, zero_key: int | None):
    """The score_mod of `spec`, from its own elementwise logits (nothing here repeats a formula).

    `params`: [H] tensors indexed by head; `row_log_count` [B, H, Lq]: log of the keys of each row (SSMax);
    `zero_key`: index of the appended key of softmax_1, whose score is replaced by exactly 0.
    """
    logits = spec.logits
    if logits is identity_logits:
        score_mod = None
    else:
        def score_mod(score, batch, head, q_idx, kv_idx):
            log_n = None if row_log_count is None else row_log_count[batch, head, q_idx]
            return logits(score, {name: value[head] for name, value in params.items()}, log_n)
    if zero_key is None:
        return score_mod
    inner = score_mod

    def with_zero_key(score, batch, head, q_idx, kv_idx):
        base = score if inner is None else inner(score, batch, head, q_idx, kv_idx)
        return torch.where(kv_idx == zero_key, torch.zeros_like(base), base)

    return with_zero_key


def flex_scored_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    spec: ScoringFunction,
    params: dict[str, Tensor],
    mask: Tensor | None,
    scale: float,
    compile: bool | None = None,
    is_causal: bool = False,
) -> Tensor:
    """query [B,H,Lq,D], key/value [B,Hkv,Lk,D]; mask bool broadcastable to [B,H,Lq,Lk] (True = attend) or None.

    `is_causal` (top-left, with mask=None): a causal mask_mod and a block mask cached per (Lq, Lk, device),
    instead of a dense mask built and indexed on every call."""
    if is_causal and mask is not None:
        raise ValueError("flex_scored_attention: pass is_causal with mask=None, or fold the causal part into mask")
    from torch.nn.attention.flex_attention import create_block_mask

    batch, heads, q_len, _ = query.shape
    kv_len = key.shape[2]
    zero_key = None
    mask_heads = 1 if mask is None or mask.shape[1] == 1 else heads  # a mask per head, or one for all
    if spec.extra_zero_logit:
        zero_key = kv_len
        key = torch.cat([key, key.new_zeros(key.shape[:2] + (1, key.shape[3]))], dim=2)
        value = torch.cat([value, value.new_zeros(value.shape[:2] + (1, value.shape[3]))], dim=2)
        if mask is not None:
            mask = torch.cat([mask, mask.new_ones(mask.shape[:-1] + (1,))], dim=-1)
        kv_len += 1
    row_log_count = None
    if spec.needs_row_count:
        if mask is not None:
            counts = mask.expand(batch, mask_heads, q_len, kv_len).sum(-1)
        elif is_causal:  # query i sees keys 0..i (and softmax_1's zero key)
            real = kv_len - (zero_key is not None)
            counts = (torch.arange(1, q_len + 1).clamp(max=real) + (kv_len - real)).expand(batch, 1, q_len)
        else:
            counts = torch.full((batch, 1, q_len), kv_len)
        row_log_count = torch.log(counts.clamp_min(1).float()).to(query.device).expand(batch, heads, q_len)
    block_mask = None
    if is_causal:
        block_mask = _causal_block_mask(q_len, kv_len, zero_key, query.device)
    if mask is not None:
        dense = mask.expand(batch, mask_heads, q_len, kv_len)

        def mask_mod(b, h, q_idx, kv_idx):
            return dense[b, h if mask_heads > 1 else 0, q_idx, kv_idx]

        block_mask = create_block_mask(mask_mod, batch, None if mask_heads == 1 else heads, q_len, kv_len,
                                       device=query.device)
    params = {k: _head_indexed(v, heads, query.device) for k, v in params.items()}
    score_mod = make_score_mod(spec, params, row_log_count, zero_key)
    fn = _flex_fn(compile, query.device, query.shape[-1])
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile.*")
        out = fn(
            query,
            key,
            value,
            score_mod=score_mod,
            block_mask=block_mask,
            scale=scale,
            enable_gqa=key.shape[1] != heads,
        )
    if mask is not None:
        # rows with no key to attend to: flex already returns 0 there; make it explicit for every torch version
        empty = ~mask.expand(batch, mask_heads, q_len, kv_len).any(-1, keepdim=True)
        out = out.masked_fill(empty, 0.0)
    return out
