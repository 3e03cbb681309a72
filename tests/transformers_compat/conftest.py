"""The adapter runs only when its marker is selected (`-m transformers_common`): otherwise its modules are not
even imported, so the default test run pays nothing for transformers' large test modules.

Each test starts from generators seeded by its name (Python's `random`, the upstream tests' own `global_rng`,
numpy and torch): upstream draws its inputs and weights from unseeded module-level generators, so a test's inputs
depended on every test before it and a tolerance check at the edge of bfloat16 passed or failed by chance
(docs/dev/transformers_compat.md, "Reproducible inputs"). `SSA_HF_TRANSFORMERS_SEED=<n>` draws another set.
"""

from __future__ import annotations

import os
import random
import zlib

import pytest

from . import upstream

MARKER = "transformers_common"


def _selected(config) -> bool:
    expression = config.option.markexpr
    if not expression:
        return True
    try:
        from _pytest.mark.expression import Expression

        return bool(Expression.compile(expression).evaluate(lambda name, **kwargs: name == MARKER))
    except Exception:  # a pytest without this (private) parser: collect, and let -m deselect
        return True


def pytest_ignore_collect(collection_path, config):
    if collection_path.name.startswith("test_") and not _selected(config):
        return True
    return None


def pytest_configure(config):
    # the upstream tests carry transformers' own markers; register them the way the folder's glue does
    if _selected(config) and upstream.missing_reason() is None:
        upstream.load_glue().pytest_configure(config)


def seed_of(name: str) -> int:
    """The seed of the test `name` (its function name with any parameters, the same for every adapted class, so
    that SSALlama and SSABert, ssa and softmax, see the same draws), offset by SSA_HF_TRANSFORMERS_SEED."""
    return (zlib.crc32(name.encode()) + int(os.environ.get("SSA_HF_TRANSFORMERS_SEED", "0"))) % 2**32


@pytest.fixture(autouse=True)
def _seeded_generators(request):
    import numpy as np
    import torch

    seed = seed_of(request.node.name)
    random.seed(seed)
    upstream.module("test_modeling_common").global_rng.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    yield
