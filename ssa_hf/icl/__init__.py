"""The SSA paper's in-context-learning experiments (REFERENCE §3): tasks, model, training, evaluation, report.

    from ssa_hf.icl import preset, run_icl
    results = run_icl(preset("quick"), "outputs/icl")

`ssa-hf icl --preset quick --output-dir DIR` is the same from the command line.
"""

from .config import PRESETS, EvalConfig, ICLConfig, TrainConfig, config_from_dict, load_config, preset
from .evaluate import evaluate_task, linear_metrics, majority_baseline, probe, quantifier_metrics
from .model import ICLModel, ICLModelConfig
from .pipeline import ICLResults, run_icl, run_one, run_specs
from .stats import mean_ci
from .tasks import TASKS, Curriculum, Prompts, probe_prompts, quantifier_labels, sample, sample_balanced, sample_standard
from .train import RunSpec, TrainResult, train_run

__all__ = [
    "PRESETS",
    "TASKS",
    "Curriculum",
    "EvalConfig",
    "ICLConfig",
    "ICLModel",
    "ICLModelConfig",
    "ICLResults",
    "Prompts",
    "RunSpec",
    "TrainConfig",
    "TrainResult",
    "config_from_dict",
    "evaluate_task",
    "linear_metrics",
    "load_config",
    "majority_baseline",
    "mean_ci",
    "preset",
    "probe",
    "probe_prompts",
    "quantifier_labels",
    "quantifier_metrics",
    "run_icl",
    "run_one",
    "run_specs",
    "sample",
    "sample_balanced",
    "sample_standard",
    "train_run",
]
