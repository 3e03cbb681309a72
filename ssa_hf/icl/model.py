"""Read-in / backbone / read-out: the model of the ICL experiments around ssa-hf's decoder.

The backbone (`backbone` in `ICLModelConfig`, config.py) is `SSALlamaModel` ("llama": RoPE, RMSNorm, SwiGLU; the
read-in also gets a flag that marks label slots, which relative positions alone cannot tell) or `SSAGPT2Model`
("gpt2": the paper's GPT-2 with learned absolute positions, LayerNorm and a GELU MLP, and no slot flag), fed
through `inputs_embeds`; its `attention_scoring` is any entry of the scoring registry, so the softmax baseline and
SSA are the same model with one field changed. `attention_only=True` drops every MLP block (an MLP-free
model, llama only: the pre-attention norm and the residual around attention stay, so it is not the authors'
attention-only variant, which removes them too).
"""

from __future__ import annotations

from torch import Tensor, nn

from ..models.modeling_ssa_gpt2 import SSAGPT2Model
from ..models.modeling_ssa_llama import SSALlamaModel
from .config import ICLModelConfig  # noqa: F401  (re-exported: it was defined here)

# read-in features per token: [value, is-label-slot] (see `Prompts.features`)
FEATURES = 2
# backbone -> (model class, read-in features it uses: GPT-2's absolute positions tell the slots apart alone)
BACKBONES = {"llama": (SSALlamaModel, FEATURES), "gpt2": (SSAGPT2Model, 1)}


class ICLModel(nn.Module):
    """features [B, T, 2] -> read-in -> backbone (causal) -> read-out -> one scalar per token [B, T]. The GPT-2
    backbone reads the value only (features[..., :1])."""

    def __init__(self, config: ICLModelConfig, attn_implementation: str = "ssa_auto"):
        super().__init__()
        self.config = config
        backbone_config = config.backbone_config()
        backbone_config._attn_implementation = None
        backbone_class, self.read_in_features = BACKBONES[config.backbone]
        self.read_in = nn.Linear(self.read_in_features, config.width)
        self.backbone = backbone_class._from_config(backbone_config, attn_implementation=attn_implementation)
        self.read_out = nn.Linear(config.width, 1)

    def set_attn_implementation(self, name: str) -> None:
        self.backbone.set_attn_implementation(name)

    def forward(self, features: Tensor, output_attentions: bool = False):
        if features.dim() != 3 or features.shape[-1] != FEATURES:
            raise ValueError(f"features must have shape [batch, tokens, {FEATURES}], got {tuple(features.shape)}")
        embeds = self.read_in(features[..., : self.read_in_features])
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
