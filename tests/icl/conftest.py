import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


@pytest.fixture
def tiny_config():
    """A whole experiment small enough for a unit test: 1-layer width-16 model, 2 steps, tiny grids."""
    from ssa_hf.icl import config_from_dict

    return config_from_dict(
        {
            "name": "test",
            "tasks": ["every"],
            "attention_scoring": ["softmax", "ssa"],
            "seeds": [0, 1],
            "model": {"layers": 1, "heads": 2, "width": 16, "max_points": 32},
            "train": {"steps": 2, "batch_size": 8, "warmup_steps": 0, "checkpoint_every": 1, "log_every": 1,
                      "curriculum": {"start": 5, "end": 7, "increment": 2, "interval": 1}},
            "eval": {"sigmas": [1, 8], "lengths": [6, 12], "batches": 1, "batch_size": 8,
                     "linear_sigmas_x": [1, 2], "linear_sigmas_ab": [1, 3]},
            "stats": {"primary": {"min_value": 8}, "bootstrap_resamples": 500},
            "threads": 1,
        }
    )
