"""The remote-code unit of ssa-hf.

Every module in this folder imports only torch, transformers and its own siblings (relative imports), so that
`save_pretrained` can copy the files a checkpoint needs and `trust_remote_code=True` loads it where ssa-hf is
not installed. Nothing here imports from the rest of the package.
"""

from .attention import (
    BACKENDS,
    DEFAULT_IMPLEMENTATION,
    IMPLEMENTATIONS,
    register_with_transformers,
    scored_attention,
    ssa_attention,
    supported_backends,
)
from .linear import LINEAR_ATTENTIONS
from .scoring import ALL_SCORING_FUNCTIONS, SCORING_FUNCTIONS, get_scoring_function, register_scoring_function
from .settings import ScoringParameters, card_fields
from .registration import register_auto_classes

register_auto_classes()  # AutoConfig / AutoModel* know every family of families.py as soon as the models are imported

__all__ = [
    "ALL_SCORING_FUNCTIONS",
    "LINEAR_ATTENTIONS",
    "BACKENDS",
    "DEFAULT_IMPLEMENTATION",
    "IMPLEMENTATIONS",
    "SCORING_FUNCTIONS",
    "ScoringParameters",
    "card_fields",
    "get_scoring_function",
    "register_scoring_function",
    "register_with_transformers",
    "scored_attention",
    "ssa_attention",
    "supported_backends",
]
