"""Checkpoint folders, model cards, converting checkpoints to SSA, and publishing to the Hugging Face Hub.

One module per job, dependencies pointing down (folders <- cards <- convert, publish):
- `folders`: reading checkpoint folders without running their code (config, family, task, stored scoring
  parameters);
- `card_inputs` and `cards`: `render_model_card(model | folder | config, training=..., evaluation=...,
  base_preset=...)` returns a checked `huggingface_hub.ModelCard`; `write_model_card(folder, ...)` writes it;
- `convert`: `convert_checkpoint(src, dst, attention_scoring="ssa")` turns a Llama, RoBERTa, BERT or GPT-2
  checkpoint folder (or an ssa-hf one) into its ssa-hf twin;
- `publish`: `save_checkpoint_folder(model, folder, tokenizer=...)` writes a Hub-ready folder atomically,
  `push_to_hub(folder, repo_id)` uploads it.
Folders appear atomically through `ssa_hf.reporting.atomic_folder`, the package's one tmp-then-rename helper.
"""

from ..reporting import DestinationExistsError, atomic_folder
from .card_inputs import EvaluationResult, normalize_evaluation, normalize_training
from .cards import (
    BIBTEX,
    CARD_INPUTS_FILE,
    REPO_ID_PLACEHOLDER,
    model_cards_dir,
    render_model_card,
    validate_model_card,
    write_model_card,
)
from .convert import CONVERSION_FILE, ConversionError, ConversionResult, convert_checkpoint
from .folders import load_ssa_config, read_scoring_parameters, scoring_parameter_table, task_of_architecture
from .publish import (
    DEFAULT_IGNORE_PATTERNS,
    PushError,
    PushResult,
    check_checkpoint_folder,
    explain_push_failure,
    push_to_hub,
    save_checkpoint_folder,
)

__all__ = [
    "BIBTEX",
    "ConversionError",
    "ConversionResult",
    "DestinationExistsError",
    "EvaluationResult",
    "PushError",
    "PushResult",
    "atomic_folder",
    "check_checkpoint_folder",
    "convert_checkpoint",
    "load_ssa_config",
    "normalize_evaluation",
    "normalize_training",
    "push_to_hub",
    "read_scoring_parameters",
    "render_model_card",
    "save_checkpoint_folder",
    "validate_model_card",
    "write_model_card",
]
