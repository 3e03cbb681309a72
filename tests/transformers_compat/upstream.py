"""Loads transformers' own model tests (not shipped in its wheel) from ../shared/transformers_tests.

The folder holds unmodified upstream files (see its SOURCE.md) whose modules import each other as the package
`tests`, which is this project's test package too. They are loaded here under another package name
(`UPSTREAM_PACKAGE`), so their relative imports resolve inside the folder; the one absolute import
(`from tests.exporters.test_export import ...`) gets an alias. The folder's own glue (conftest.py: offline
variables, version shims, markers) is loaded by file path. Nothing is copied into this repository.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _default_folder() -> Path:
    # ../shared/transformers_tests beside the checkout (a git worktree may sit one level deeper)
    candidates = [parent / "shared" / "transformers_tests" for parent in REPO.parents[:2]]
    return next((c for c in candidates if c.is_dir()), candidates[0])


FOLDER = Path(os.environ.get("SSA_HF_TRANSFORMERS_TESTS") or _default_folder())
UPSTREAM_PACKAGE = "transformers_upstream_tests"
GLUE_MODULE = "transformers_upstream_glue"
# the upstream file this adapter was written against (transformers 5.24.0, see the folder's SOURCE.md)
_MARKER_FILE = FOLDER / "tests" / "test_modeling_common.py"


def missing_reason() -> str | None:
    """Why the upstream tests cannot run here, or None."""
    if not _MARKER_FILE.is_file():
        return (
            f"transformers' model tests not found at {FOLDER} (they are not in its wheel; set SSA_HF_TRANSFORMERS_TESTS "
            "to a folder laid out as described in docs/transformers_compat.md)"
        )
    if importlib.util.find_spec("parameterized") is None:
        return "transformers' model tests need the `parameterized` package: pip install 'ssa-hf[dev]'"
    return None


def load_glue():
    """The folder's conftest.py, loaded once by path (it sets offline variables and version shims on import)."""
    if GLUE_MODULE not in sys.modules:
        spec = importlib.util.spec_from_file_location(GLUE_MODULE, FOLDER / "conftest.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[GLUE_MODULE] = module
        spec.loader.exec_module(module)
    return sys.modules[GLUE_MODULE]


def module(dotted: str):
    """Import `tests.<dotted>` of the upstream folder, e.g. module("models.llama.test_modeling_llama")."""
    load_glue()
    if UPSTREAM_PACKAGE not in sys.modules:
        spec = importlib.machinery.ModuleSpec(UPSTREAM_PACKAGE, None, is_package=True)
        spec.submodule_search_locations = [str(FOLDER / "tests")]
        sys.modules[UPSTREAM_PACKAGE] = importlib.util.module_from_spec(spec)
        exporters = importlib.import_module(f"{UPSTREAM_PACKAGE}.exporters.test_export")
        # generation/test_utils.py imports this one module absolutely, as `tests.exporters.test_export`
        sys.modules.setdefault("tests.exporters", sys.modules[f"{UPSTREAM_PACKAGE}.exporters"])
        sys.modules.setdefault("tests.exporters.test_export", exporters)
    return importlib.import_module(f"{UPSTREAM_PACKAGE}.{dotted}")
