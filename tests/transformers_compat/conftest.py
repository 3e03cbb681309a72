"""The adapter runs only when its marker is selected (`-m transformers_common`): otherwise its modules are not
even imported, so the default test run pays nothing for transformers' large test modules."""

from __future__ import annotations

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
