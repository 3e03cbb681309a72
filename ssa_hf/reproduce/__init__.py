"""`ssa-hf reproduce`: the paper's claims at a stated scale (ICL, BabyBERTa + Zorro, a small decoder with
perplexity and lm-eval), each with its declared confirmatory seeds, primary endpoint, test and verdict, in RESULTS.md.

    from ssa_hf.reproduce import load_config, run_reproduce
    run_reproduce(load_config("configs/experiments/reproduce_cpu.yaml"), "outputs/reproduce")
"""

from .config import Endpoint, ICLExperiment, LMExperiment, ReproduceConfig, config_from_dict, load_config, scale_config_path
from .pipeline import plan, run_reproduce
from .verdict import EXCLUDED, INCONCLUSIVE, NOT_MEASURABLE, NOT_REPRODUCED, REPRODUCED, VERDICTS, measurable, paired_comparison, verdict

__all__ = [
    "EXCLUDED",
    "INCONCLUSIVE",
    "NOT_MEASURABLE",
    "NOT_REPRODUCED",
    "REPRODUCED",
    "Endpoint",
    "ICLExperiment",
    "LMExperiment",
    "ReproduceConfig",
    "VERDICTS",
    "config_from_dict",
    "load_config",
    "measurable",
    "paired_comparison",
    "plan",
    "run_reproduce",
    "scale_config_path",
    "verdict",
]
