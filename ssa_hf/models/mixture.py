"""A mixture of scoring heads: `attention_scoring` as a list with one scoring-function name per head.

Heads are grouped by function; each group has its own `ScoringParameters` and runs on any backend that can run
that function; outputs (and weights) are put back in head order. `run_groups` is the one runner, used by the
functional API and the transformers attention functions alike (a single function is one group of every head).
Part of the remote-code unit: imports only torch and siblings.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn

from .backends import AttentionCall
from .scoring import ScoringFunction, ScoringModule, get_scoring_function
from .settings import ScoringParameters

# (scoring registry entry, the query heads it runs, its parameters: [len(heads)] tensors)
Group = tuple[ScoringFunction, list[int], dict]


class MixedScoringParameters(ScoringModule):
    def __init__(self, names: list[str], config=None, **settings):
        super().__init__()
        self.names = list(names)
        self.order = list(dict.fromkeys(self.names))  # group order = first appearance
        self.groups = nn.ModuleDict(
            {name: ScoringParameters(name, self.names.count(name), config, **settings) for name in self.order}
        )
        # plain lists, not buffers: from_pretrained materialises models from the meta device, where a
        # non-persistent buffer would come back uninitialised
        self.heads = {name: [h for h, n in enumerate(self.names) if n == name] for name in self.order}

    def reset_parameters(self) -> None:
        for group in self.groups.values():
            group.reset_parameters()

    def attention_groups(self, heads: int) -> list[Group]:
        return [(get_scoring_function(name), self.heads[name], self.groups[name]()) for name in self.order]

    def parameter_problems(self, prefix: str = "") -> list[str]:
        return [line for name, group in self.groups.items() for line in group.parameter_problems(f"{prefix}groups.{name}.")]

    def forward(self) -> dict[str, dict[str, Tensor]]:
        return {name: group() for name, group in self.groups.items()}

    def extra_repr(self) -> str:
        return f"heads={self.names}"


def run_groups(call: AttentionCall, groups: list[Group],
               run_group: Callable[[AttentionCall], tuple[Tensor, Tensor | None]]) -> tuple[Tensor, Tensor | None]:
    """Run `call` once per group (its heads, their key/value heads and mask rows) and reassemble in head order."""
    query, key, value = call.query, call.key, call.value
    if len(groups) == 1:
        spec, _, params = groups[0]
        return run_group(call.for_group(spec, params))
    heads = query.shape[1]
    per_kv = heads // key.shape[1]
    out = query.new_empty(query.shape[:3] + (value.shape[-1],))
    weights = None
    for spec, head_list, params in groups:
        index = torch.tensor(head_list, dtype=torch.long, device=query.device)
        kv_index = index // per_kv
        mask = call.mask
        if mask is not None and mask.shape[1] == heads > 1:
            mask = mask[:, index.to(mask.device)]
        group_out, group_weights = run_group(call.for_group(
            spec, params, query=query[:, index], key=key[:, kv_index], value=value[:, kv_index], mask=mask))
        out = out.index_copy(1, index, group_out.to(out.dtype))
        if group_weights is not None:
            if weights is None:
                weights = group_weights.new_zeros(query.shape[:3] + (key.shape[2],))
            weights = weights.index_copy(1, index, group_weights.to(weights.dtype))
    return out, weights
