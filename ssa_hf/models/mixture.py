"""A mixture of scoring heads: `attention_scoring` as a list with one scoring-function name per head.

Heads are grouped by function; each group has its own `ScoringParameters` and runs on any backend that can run
that function; outputs (and weights) are put back in head order.
Part of the remote-code unit: imports only torch and siblings.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .scoring import ScoringModule, ScoringOptions, ScoringParameters


class MixedScoringParameters(ScoringModule):
    def __init__(self, names: list[str], options: ScoringOptions | None = None):
        super().__init__()
        self.names = list(names)
        self.order = list(dict.fromkeys(self.names))  # group order = first appearance
        self.groups = nn.ModuleDict(
            {name: ScoringParameters(name, self.names.count(name), options) for name in self.order}
        )
        # plain lists, not buffers: from_pretrained materialises models from the meta device, where a
        # non-persistent buffer would come back uninitialised
        self.heads = {name: [h for h, n in enumerate(self.names) if n == name] for name in self.order}

    def head_index(self, name: str, device=None) -> Tensor:
        return torch.tensor(self.heads[name], dtype=torch.long, device=device)

    def reset_parameters(self) -> None:
        for group in self.groups.values():
            group.reset_parameters()

    def forward(self) -> dict[str, dict[str, Tensor]]:
        return {name: group() for name, group in self.groups.items()}

    def extra_repr(self) -> str:
        return f"heads={self.names}"


def run_mixture(scoring: MixedScoringParameters, query: Tensor, key: Tensor, value: Tensor, run_group):
    """Run `run_group(name, params, q, k, v) -> (out [B,h,Lq,D], weights|None)` per group; reassemble in head order."""
    heads = query.shape[1]
    groups = heads // key.shape[1]
    out = query.new_empty(query.shape[:3] + (value.shape[-1],))
    weights = None
    for name in scoring.order:
        index = scoring.head_index(name, query.device)
        kv_index = index // groups
        group_out, group_weights = run_group(
            name, scoring.groups[name](), query[:, index], key[:, kv_index], value[:, kv_index]
        )
        out = out.index_copy(1, index, group_out.to(out.dtype))
        if group_weights is not None:
            if weights is None:
                weights = group_weights.new_zeros(query.shape[:3] + (key.shape[2],))
            weights = weights.index_copy(1, index, group_weights)
    return out, weights
