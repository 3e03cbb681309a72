"""lm-eval task YAML that names Python functions: `!function module.name` tags, written and resolved."""

from __future__ import annotations

import importlib
from typing import Any


class FunctionRef(str):
    """A function's dotted name, written as lm-eval's `!function` tag (lm-eval imports it when it loads the task)."""


def dump_task_yaml(config: dict[str, Any]) -> str:
    """The YAML text of a task mapping (safe types, FunctionRef as `!function`)."""
    import yaml

    class TaskDumper(yaml.SafeDumper):
        pass

    TaskDumper.add_representer(FunctionRef, lambda dumper, value: dumper.represent_scalar("!function", str(value)))
    return yaml.dump(config, Dumper=TaskDumper, sort_keys=False, allow_unicode=True)


def module_definition(module_name: str) -> dict[str, Any]:
    """A module's task DEFINITION, the keys listed in its FUNCTIONS as FunctionRef."""
    module = importlib.import_module(module_name)
    return {key: FunctionRef(value) if key in module.FUNCTIONS else value for key, value in module.DEFINITION.items()}


def load_function(name: str):
    """The function a FunctionRef names (ImportError or AttributeError when it cannot load)."""
    module, _, attribute = name.rpartition(".")
    return getattr(importlib.import_module(module), attribute)
