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
import re
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


def required_transformers_version() -> str | None:
    """The transformers release the folder's files belong to, as its SOURCE.md states it ("meant to be run with the
    installed **transformers X**"), or None when the folder does not say."""
    source = FOLDER / "SOURCE.md"
    if not source.is_file():
        return None
    match = re.search(r"run with the installed \*\*transformers ([0-9][0-9A-Za-z.+-]*)\*\*", source.read_text())
    return match.group(1) if match else None


def version_mismatch() -> str | None:
    """Why the installed transformers cannot run the folder's files, or None. The upstream test files import
    helpers of transformers.testing_utils that come and go between releases (5.25 dropped one that 5.24's
    test_modeling_common.py imports), so they run only with the release they were taken from."""
    import transformers

    required = required_transformers_version()
    if required is None or transformers.__version__ == required:
        return None
    return (
        f"the transformers tests in {FOLDER} are those of transformers {required} (its SOURCE.md), but transformers "
        f"{transformers.__version__} is installed; run them with that release: pip install 'transformers=={required}' "
        "(.ci/run does this before this step)"
    )


def missing_reason() -> str | None:
    """Why the upstream tests cannot run here, or None."""
    if not _MARKER_FILE.is_file():
        return (
            f"transformers' model tests not found at {FOLDER} (they are not in its wheel; set SSA_HF_TRANSFORMERS_TESTS "
            "to a folder laid out as described in docs/dev/transformers_compat.md)"
        )
    if importlib.util.find_spec("parameterized") is None:
        return "transformers' model tests need the `parameterized` package: pip install 'ssa-hf[dev]'"
    return None


if __name__ == "__main__":
    # `python tests/transformers_compat/upstream.py`: the transformers release the folder needs (.ci/run installs it)
    print(required_transformers_version() or "")


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
