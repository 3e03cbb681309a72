"""Registration of the ssa-hf model classes with transformers' Auto classes (done by `import ssa_hf`), read from
the family table (`families.py`: every head of every family, under the Auto class of its task).

`register_for_auto_class` makes `save_pretrained` write `auto_map` into config.json and copy the modeling files
(with their sibling imports) next to the weights, so checkpoints load with `trust_remote_code=True` alone.
"""

from __future__ import annotations

from transformers import AutoConfig

from .families import FAMILY_SPECS, TASKS

# config class -> {Auto class: model class}
AUTO_CLASSES = {
    spec.config_class: {TASKS[task].auto_class: model_class for task, model_class in spec.model_classes.items()}
    for spec in FAMILY_SPECS
}


def register_auto_classes() -> None:
    for config_class, models in AUTO_CLASSES.items():
        AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
        config_class.register_for_auto_class()
        for auto_class, model_class in models.items():
            auto_class.register(config_class, model_class, exist_ok=True)
            model_class.register_for_auto_class(auto_class.__name__)
