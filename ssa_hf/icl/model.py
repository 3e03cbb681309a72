"""Read-in / backbone / read-out: the model of the ICL experiments around ssa-hf's decoder.

The backbone is `SSALlamaModel` (a Llama decoder, RoPE positions) fed through `inputs_embeds`; its
`attention_scoring` (`ICLModelConfig` in config.py) is any entry of the scoring registry, so the softmax baseline and SSA are the same model with
one field changed. `attention_only=True` drops every MLP block (the paper's attention-only variant).
"""

from __future__ import annotations

from torch import Tensor, nn

from ..models.modeling_ssa_llama import SSALlamaModel
from .config import ICLModelConfig  # noqa: F401  (re-exported: it was defined here)

# read-in features per token: [value, is-label-slot] (see `Prompts.features`)
FEATURES = 2


class ICLModel(nn.Module):
    """features [B, T, 2] -> read-in -> SSALlamaModel (causal) -> read-out -> one scalar per token [B, T]."""

    def __init__(self, config: ICLModelConfig, attn_implementation: str = "ssa_auto"):
        super().__init__()
        self.config = config
        backbone_config = config.backbone_config()
        backbone_config._attn_implementation = None
        self.read_in = nn.Linear(FEATURES, config.width)
        self.backbone = SSALlamaModel._from_config(backbone_config, attn_implementation=attn_implementation)
        self.read_out = nn.Linear(config.width, 1)

    def set_attn_implementation(self, name: str) -> None:
        self.backbone.set_attn_implementation(name)

    def forward(self, features: Tensor, output_attentions: bool = False):
        if features.dim() != 3 or features.shape[-1] != FEATURES:
            raise ValueError(f"features must have shape [batch, tokens, {FEATURES}], got {tuple(features.shape)}")
        embeds = self.read_in(features)
        out = self.backbone(inputs_embeds=embeds, output_attentions=output_attentions, use_cache=False)
        values = self.read_out(out.last_hidden_state).squeeze(-1)
        if output_attentions:
            return values, out.attentions
        return values

    def predictions(self, features: Tensor) -> Tensor:
        """The model's outputs at the input positions x_1..x_L, shape [B, L]."""
        return self(features)[:, 0::2]

    def scoring_parameters(self) -> dict:
        return self.backbone.scoring_parameters()
