"""Continuous batching for ssa-hf models: paged attention that runs the configured scoring function.

transformers' continuous batching (`model.generate_batch`, `init_continuous_batching`, `ContinuousBatchingManager`,
`transformers serve --continuous-batching`, `generate(cache_implementation="paged")`) keeps the keys and values of
every request in one paged cache and runs all scheduled requests as ONE packed row: the query holds each request's
new tokens one after the other ([1, H, sum Lq, D]); the cache's `update` returns each request's keys and values,
past and new, read from its pages in position order and packed the same way ([1, Hkv, sum Lk, D]), and the call's
`cu_seq_lens_q` / `cu_seq_lens_k` give where each request starts. Its own attention names (`paged|eager`, `sdpa`,
flash) compute softmax.

- `ssa_paged` (and `ssa_paged_<backend>`): attention functions registered with transformers that read that packed
  layout and run each request's queries against its own keys only (bottom-right causal, as the new tokens are the
  last keys), through the same attention function and backend as the model's implementation (`ssa_auto` ->
  `ssa_paged`, `ssa_eager` -> `ssa_paged_eager`, ...): the scoring function and its parameters come from the module,
  masked keys get weight exactly 0. A small step (queries x keys x heads x head size up to `PACKED_BUDGET`, as a
  few requests or short ones give) runs as ONE call over the packed row with a block-diagonal causal boolean mask,
  as transformers' own `sdpa` does; a larger one runs the requests that decode one token as one batch, their keys
  gathered and padded to the longest with a boolean mask, and each prefill (or chunk of one) on its own, so that
  the work grows with each request's own keys rather than with all of them. Called without the packed layout (a
  plain `generate`, a forward), they run the model's usual attention.
- `init_continuous_batching(model, ...)`: what an ssa-hf model's `init_continuous_batching` runs: transformers' own
  manager, whose switch to a batching attention (`switch_to_cb_friendly_attn`, which accepts only `paged|eager`,
  `sdpa` and flash names and may switch a half-precision model to flash, all softmax) is replaced for ssa-hf models
  by the switch to `ssa_paged`. Names of other models, and what they run, are unchanged.

Part of the remote-code unit: imports only torch, transformers and siblings.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from .attention import IMPLEMENTATIONS, boolean_mask, make_transformers_attention
from .backends import BACKEND_NAMES

__all__ = ["PAGED_IMPLEMENTATIONS", "continuous_batching_problem", "init_continuous_batching", "make_paged_attention",
           "paged_implementation", "register_paged_with_transformers"]

# paged attn_implementation names -> backend (None: chosen per call), as IMPLEMENTATIONS
PAGED_IMPLEMENTATIONS = {"ssa_paged": None, **{f"ssa_paged_{name}": name for name in BACKEND_NAMES}}
# the model's implementation -> the paged one that runs the same backend
PAGED_OF = {name: ("ssa_paged" if backend is None else f"ssa_paged_{backend}")
            for name, backend in IMPLEMENTATIONS.items()}
# transformers' continuous batching hands attention each request's past and new keys, packed, from this version on
# (5.17 passed the new keys only; under 5.21 and 5.23 every request failed before attention ran): older ones are refused
CONTINUOUS_BATCHING_SINCE = (5, 25)
# queries x keys x heads x head size up to which one packed call with a block mask beats the per-request calls:
# below it, calls cost more than the masked-out scores (tiny decoder, fp32: scripts/bench_serving.py)
PACKED_BUDGET = 1 << 22


class _Plan:
    """Where each request of a packed call lies (from cu_seq_lens_q / cu_seq_lens_k), and the gather indices of
    the one-token (decoding) requests, built once per batch step and shared by its layers."""

    __slots__ = ("key", "spans", "prefills", "decode_spans", "only_decodes", "_gather", "_packed")

    def __init__(self, cu_q: list[int], cu_k: list[int], device):
        self.key = (tuple(cu_q), tuple(cu_k), device)
        self._gather = self._packed = None  # built on first use: a step takes one route
        self.prefills, decodes = [], []
        for i in range(len(cu_q) - 1):
            q0, q1, k0, k1 = cu_q[i], cu_q[i + 1], cu_k[i], cu_k[i + 1]
            if q1 == q0:  # a padding request (transformers pads the batch for static shapes)
                continue
            if q1 - q0 > k1 - k0:
                raise ValueError(f"paged attention: request {i} has {q1 - q0} new tokens but only {k1 - k0} keys "
                                 f"(cu_seq_lens_q={cu_q}, cu_seq_lens_k={cu_k})")
            (decodes if q1 - q0 == 1 else self.prefills).append((q0, q1, k0, k1))
        self.spans = self.prefills + decodes
        self.decode_spans = decodes
        # the number of queries when they are exactly the decoding requests' tokens, in order (else -1)
        self.only_decodes = len(decodes) if not self.prefills and all(
            q0 == i for i, (q0, _, _, _) in enumerate(decodes)) else -1

    def decode_gather(self) -> tuple[Tensor, Tensor, Tensor | None]:
        """For two or more decoding requests: their query rows [R], the key rows that pad each to the longest
        [R, longest] (padding reads the request's first key), and the mask of real keys [R, 1, 1, longest] (None
        when all are as long)."""
        if self._gather is None:
            device, decodes = self.key[2], self.decode_spans
            lengths = torch.tensor([k1 - k0 for _, _, k0, k1 in decodes], device=device)
            starts = torch.tensor([k0 for _, _, k0, _ in decodes], device=device)
            longest = int(max(k1 - k0 for _, _, k0, k1 in decodes))
            steps = torch.arange(longest, device=device)
            index = starts[:, None] + torch.where(steps[None] < lengths[:, None], steps[None], 0)
            mask = None if bool((lengths == longest).all()) else (steps[None] < lengths[:, None])[:, None, None, :]
            self._gather = (torch.tensor([q0 for q0, _, _, _ in decodes], device=device), index, mask)
        return self._gather

    def packed_mask(self, queries: int, keys: int) -> Tensor:
        """[1, 1, queries, keys], True = attend: each request's new tokens see its own keys, bottom-right causal
        (its new tokens are its last keys); rows of padding (no request) see nothing and come out as zero rows."""
        if self._packed is not None and self._packed.shape[-2:] == (queries, keys):
            return self._packed
        # each row sees one range of keys, [first, last]: its request's first key up to its own position (its
        # request's new tokens are the request's last keys); rows of no request see the empty range [1, 0]
        first, last = [1] * queries, [0] * queries
        for q0, q1, k0, k1 in self.spans:
            first[q0:q1] = [k0] * (q1 - q0)
            last[q0:q1] = range(k1 - (q1 - q0), k1)
        bounds = torch.tensor([first, last], device=self.key[2])[:, :, None]
        keys_at = torch.arange(keys, device=self.key[2])
        mask = (keys_at >= bounds[0]) & (keys_at <= bounds[1])
        self._packed = mask[None, None]
        return self._packed


_PLANS: dict = {}  # the last plan per device: the layers of one step share it


def _plan(cu_q: Tensor, cu_k: Tensor) -> _Plan:
    lists = (cu_q.tolist(), cu_k.tolist())
    device = cu_k.device
    plan = _PLANS.get(device)
    if plan is None or plan.key != (tuple(lists[0]), tuple(lists[1]), device):
        plan = _PLANS[device] = _Plan(lists[0], lists[1], device)
    return plan


def _causal_from_end(q_len: int, k_len: int, device) -> Tensor | None:
    """The new tokens are the last q_len of k_len keys: query i sees keys j <= k_len - q_len + i (None when
    q_len == k_len, which the attention function applies itself as top-left causal, and for one query, which sees
    every key)."""
    if q_len == k_len or q_len == 1:
        return None
    return torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(k_len - q_len)[None, None]


def _rowwise(module) -> bool:
    """Whether every head of the module scores row by row (its requests can share one masked call): linear
    attention's call defaults depend on the key length (CosFormer's m), so those run request by request. Refuses a
    module continuous batching cannot run; checked once per module (a step calls it for every layer)."""
    known = module.__dict__.get("_ssa_paged_rowwise")
    if known is None:
        if not getattr(module, "is_causal", False):
            raise ValueError(f"attn_implementation 'ssa_paged': continuous batching runs causal decoders only; "
                             f"{type(module).__name__} is not causal")
        if getattr(module, "sliding_window", None):
            raise ValueError("attn_implementation 'ssa_paged' has no sliding-window attention; "
                             "use model.generate for this model")
        scoring = getattr(module, "scoring", None)
        groups = scoring.attention_groups(getattr(module.config, "num_attention_heads", 1)) \
            if callable(getattr(scoring, "attention_groups", None)) else []
        known = module.__dict__["_ssa_paged_rowwise"] = all(getattr(spec, "kind", "rowwise") == "rowwise"
                                                            for spec, _, _ in groups)
    return known


def _rows(tensor: Tensor) -> Tensor:
    """[1, heads, tokens, D] -> [tokens, heads, D]: the cache's own layout (a view when it came from there)."""
    return tensor[0].transpose(0, 1)


def _decode_batch(dense, module, query, key, value, plan: _Plan, scaling, dropout) -> Tensor:
    """Every one-token request in one call: [R, H, 1, D] queries against [R, Hkv, longest, D] keys (padding
    masked out); returns [R, H, D] in request order."""
    rows_q, index, mask = plan.decode_gather()
    rows, longest = index.shape
    q = _rows(query).index_select(0, rows_q).unsqueeze(2)  # [R, H, 1, D]
    k, v = (_rows(x).index_select(0, index.reshape(-1)).view(rows, longest, x.shape[1], x.shape[3])
            .transpose(1, 2) for x in (key, value))  # [R, Hkv, longest, D]
    part, _ = dense(module, q, k, v, mask, scaling=scaling, dropout=dropout)
    return part[:, 0]


def make_paged_attention(backend: str | None):
    """An `AttentionInterface` function for transformers' paged cache, running the module's scoring function on
    `backend` (None = auto) request by request; without the packed layout, the model's usual attention."""
    dense = make_transformers_attention(backend)

    def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
        if not (isinstance(cu_q, Tensor) and isinstance(cu_k, Tensor)) or query.shape[0] != 1:
            return dense(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)
        rowwise = _rowwise(module)
        plan = _plan(cu_q, cu_k)
        if key.shape[2] < plan.key[1][-1]:  # the new keys alone (transformers < 5.25): attention would miss the past
            raise ValueError(f"paged attention: the keys hold {key.shape[2]} tokens but cu_seq_lens_k ends at "
                             f"{plan.key[1][-1]} (the new keys alone, without the past: a layout ssa_paged does not "
                             f"read). {continuous_batching_problem() or 'Use model.generate.'}")
        _, heads, queries, head_dim = query.shape
        if len(plan.spans) == 1 and plan.spans[0][:2] == (0, queries):
            _, q1, k0, k1 = plan.spans[0]  # one request: its call as it is
            mask = _causal_from_end(q1, k1 - k0, query.device)
            return dense(module, query, key[:, :, k0:k1], value[:, :, k0:k1], mask, scaling=scaling, dropout=dropout)
        if rowwise and queries * key.shape[2] * heads * head_dim <= PACKED_BUDGET:
            out, _ = dense(module, query, key, value, plan.packed_mask(queries, key.shape[2]), scaling=scaling,
                           dropout=dropout)
            return out, None  # weights over the packed row are no request's
        batched = len(plan.decode_spans) > 1 and rowwise
        if batched and plan.only_decodes == query.shape[2]:  # a decoding step: every query is a request's token
            return _decode_batch(dense, module, query, key, value, plan, scaling, dropout).unsqueeze(0), None
        out = query.new_zeros(query.shape[2], heads, head_dim)  # [Q, H, D]; rows of padding requests stay 0
        for q0, q1, k0, k1 in plan.prefills:
            mask = _causal_from_end(q1 - q0, k1 - k0, query.device)
            part, _ = dense(module, query[:, :, q0:q1], key[:, :, k0:k1], value[:, :, k0:k1], mask, scaling=scaling,
                            dropout=dropout)
            out[q0:q1] = part[0]
        if batched:
            out.index_copy_(0, plan.decode_gather()[0], _decode_batch(dense, module, query, key, value, plan, scaling, dropout))
        else:
            for q0, q1, k0, k1 in plan.decode_spans:
                part, _ = dense(module, query[:, :, q0:q1], key[:, :, k0:k1], value[:, :, k0:k1], None,
                                scaling=scaling, dropout=dropout)
                out[q0:q1] = part[0]
        out = out.unsqueeze(0)  # [B, Q, H, D], as attention functions return
        return out, None

    attention.__name__ = f"ssa_paged_{backend or 'auto'}_attention"
    attention.runs_modules_of_any_copy = True
    return attention


def register_paged_with_transformers() -> None:
    """Make `attn_implementation="ssa_paged" | "ssa_paged_<backend>"` valid (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    for name, backend in PAGED_IMPLEMENTATIONS.items():
        AttentionInterface.register(name, make_paged_attention(backend))
        AttentionMaskInterface.register(name, boolean_mask)


def paged_implementation(model) -> str | None:
    """The paged implementation that runs `model`'s attention in continuous batching: ssa-hf's for an ssa-hf
    implementation, None for transformers' own (softmax models only: ssa-hf refuses those names for the others)."""
    current = model.config._attn_implementation
    if current in PAGED_IMPLEMENTATIONS:
        return current
    return PAGED_OF.get(current)


@functools.cache
def _manager_class():
    from transformers.generation.continuous_batching import ContinuousBatchingManager

    class ScoredContinuousBatchingManager(ContinuousBatchingManager):
        """transformers' manager; for an ssa-hf implementation, its switch to a batching attention goes to ssa-hf's
        paged attention of the same backend, and never to flash (softmax) in half precision."""

        def switch_to_cb_friendly_attn(self, model, auto_switch_to_flash: bool = True) -> None:
            target = paged_implementation(model)
            if target is None:  # transformers' own attention (a softmax model): its own switch
                return super().switch_to_cb_friendly_attn(model, auto_switch_to_flash)
            current = model.config._attn_implementation
            if target != current:
                model.set_attn_implementation(target)
                self._original_attn_impl = current

    return ScoredContinuousBatchingManager


def continuous_batching_problem() -> str | None:
    """Why the installed transformers cannot batch ssa-hf models, or None."""
    import transformers

    found = tuple(int(part) for part in transformers.__version__.split(".")[:2] if part.isdigit())
    if found >= CONTINUOUS_BATCHING_SINCE:
        return None
    since = ".".join(map(str, CONTINUOUS_BATCHING_SINCE))
    return (f"continuous batching of ssa-hf models needs transformers >= {since} (found {transformers.__version__}); "
            f"upgrade it: pip install -U 'transformers>={since}'")


@torch.no_grad()
def init_continuous_batching(model, stock_init, generation_config=None, continuous_batching_config=None,
                             workload_hints=None):
    """`model.init_continuous_batching` for an ssa-hf model (`stock_init`: transformers' own, bound). A manager
    kept from an earlier session (`persistent_manager`) is transformers' to return; a new one is built with the
    same settings transformers would resolve, as the manager that switches to `ssa_paged`."""
    if paged_implementation(model) is None or isinstance(getattr(model, "_cached_continuous_batching_manager", None),
                                                         _manager_class().__mro__[1]):
        return stock_init(generation_config=generation_config, continuous_batching_config=continuous_batching_config,
                          workload_hints=workload_hints)
    problem = continuous_batching_problem()
    if problem:
        raise ValueError(problem)
    from transformers import ContinuousBatchingConfig

    generation_config = model.generation_config if generation_config is None else generation_config
    if generation_config is None:
        raise ValueError("A GenerationConfig must be provided or set in the model.")
    if generation_config.eos_token_id is None:
        generation_config.eos_token_id = -1  # as transformers: no end-of-sequence token, generation runs to its limit
    if continuous_batching_config is None:
        continuous_batching_config = getattr(generation_config, "continuous_batching_config", None)
        if not isinstance(continuous_batching_config, ContinuousBatchingConfig):
            continuous_batching_config = ContinuousBatchingConfig()
    return _manager_class()(model=model, generation_config=generation_config,
                            continuous_batching_config=continuous_batching_config, workload_hints=workload_hints)


register_paged_with_transformers()
