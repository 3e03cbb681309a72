"""Read-in / backbone / read-out: the model of the ICL experiments around ssa-hf's decoder.

The backbone (`backbone`) is `SSALlamaModel` ("llama": RoPE, RMSNorm, SwiGLU; the read-in also gets a flag that
marks label slots, which relative positions alone cannot tell) or `SSAGPT2Model` ("gpt2": the paper's GPT-2 with
learned absolute positions, LayerNorm and a GELU MLP, and no slot flag), fed through `inputs_embeds`; its
`attention_scoring` is any entry of the scoring registry, so the softmax baseline and SSA are the same model with
one field changed. `attention_only=True` drops every MLP block (the paper's attention-only variant; llama only).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from torch import Tensor, nn

from ..models.configuration_ssa_gpt2 import SSAGPT2Config
from ..models.configuration_ssa_llama import SSALlamaConfig
from ..models.modeling_ssa_gpt2 import SSAGPT2Model
from ..models.modeling_ssa_llama import SSALlamaModel
from ..models.scoring import ALL_SCORING_FUNCTIONS

# read-in features per token: [value, is-label-slot] (see `Prompts.features`)
FEATURES = 2
# backbone -> (model class, read-in features it uses: GPT-2's absolute positions tell the slots apart alone)
BACKBONES = {"llama": (SSALlamaModel, FEATURES), "gpt2": (SSAGPT2Model, 1)}


@dataclass
class ICLModelConfig:
    """Size and attention of the ICL model. `scoring` names an entry of `ssa_hf.ALL_SCORING_FUNCTIONS`;
    `backbone` is "llama" (SSALlama) or "gpt2" (SSAGPT2, the paper's)."""

    layers: int = 2
    heads: int = 4
    width: int = 64
    mlp_ratio: int = 4
    attention_only: bool = False
    scoring: str = "ssa"
    # every other scoring field of SSALlamaConfig (ssa_b_init, ssa_n_init, ssa_granularity, ...), passed through
    scoring_options: dict | None = None
    max_points: int = 256
    backbone: str = "llama"

    def validate(self) -> None:
        if self.scoring not in ALL_SCORING_FUNCTIONS:
            raise ValueError(f"model.scoring: unknown scoring function {self.scoring!r}; choose from {list(ALL_SCORING_FUNCTIONS)}")
        for name in ("layers", "heads", "width", "mlp_ratio", "max_points"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"model.{name} must be >= 1, got {getattr(self, name)}")
        if self.width % self.heads:
            raise ValueError(f"model.width ({self.width}) must be a multiple of model.heads ({self.heads})")
        if self.backbone not in BACKBONES:
            raise ValueError(f"model.backbone: unknown backbone {self.backbone!r}; choose from {list(BACKBONES)}")
        if self.backbone == "llama" and (self.width // self.heads) % 2:
            raise ValueError(f"model.width / model.heads must be even for rotary positions, got {self.width // self.heads}")
        if self.backbone != "llama" and self.attention_only:
            raise ValueError("model.attention_only: the attention-only variant exists for backbone 'llama' only; "
                             "set model.backbone to llama or attention_only to false")

    def backbone_config(self) -> SSALlamaConfig | SSAGPT2Config:
        self.validate()
        options = dict(self.scoring_options or {})
        if "attention_scoring" in options:
            raise ValueError("model.scoring_options: set the scoring function with model.scoring, not attention_scoring")
        shared = dict(
            vocab_size=1,  # unused: inputs arrive through inputs_embeds
            hidden_size=self.width,  # GPT-2's config maps these common names onto n_embd, n_layer, n_head, n_positions
            num_hidden_layers=self.layers,
            num_attention_heads=self.heads,
            max_position_embeddings=2 * self.max_points,
            attention_scoring=self.scoring,
            pad_token_id=None,
            bos_token_id=None,
            eos_token_id=None,
            tie_word_embeddings=False,
            **options,
        )
        if self.backbone == "gpt2":
            return SSAGPT2Config(n_inner=self.mlp_ratio * self.width, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                 use_cache=False, **shared)
        return SSALlamaConfig(intermediate_size=self.mlp_ratio * self.width, num_key_value_heads=self.heads,
                              attention_dropout=0.0, attention_only=self.attention_only, **shared)

    def to_dict(self) -> dict:
        return asdict(self)


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
