"""The package's shape rules (docs/dev/architecture.md): modules of at most 600 lines, functions of at most 80, and
imports that point down the layers (kernels and models never import pipelines or the command line)."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "ssa_hf"
MODULES = sorted(PACKAGE.rglob("*.py"))
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
# the layers, lowest first: a module may import its own layer and those below it
LAYERS = ["models", "hub", "serving", "data", "train", "evaluation", "icl", "reproduce", "commands"]


def _name(path: Path) -> str:
    return path.relative_to(PACKAGE.parent).with_suffix("").as_posix().replace("/", ".")


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_module_and_function_lengths(path):
    source = path.read_text()
    assert len(source.splitlines()) <= MAX_MODULE_LINES, f"{_name(path)} has more than {MAX_MODULE_LINES} lines"
    long = [f"{node.name} ({node.end_lineno - node.lineno + 1} lines)" for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, f"{_name(path)}: functions longer than {MAX_FUNCTION_LINES} lines: {long}"


def _imports(path: Path):
    package = _name(path).rsplit(".", 1)[0] if path.name != "__init__.py" else _name(path)
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                yield ".".join(base + ([node.module] if node.module else []))
            elif node.module:
                yield node.module
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)


def _layer(module: str):
    parts = module.split(".")
    if parts[0] != "ssa_hf" or len(parts) < 2:
        return None
    return parts[1] if parts[1] in LAYERS else None


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_imports_point_down(path):
    own = _layer(_name(path))
    if own is None:
        return
    above = [m for m in _imports(path) if _layer(m) is not None and LAYERS.index(_layer(m)) > LAYERS.index(own)]
    assert not above, f"{_name(path)} ({own}) imports from layers above it: {above}"


PACKAGES = sorted({_name(p.parent) for p in MODULES if p.name == "__init__.py"})


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_name_resolves(package):
    """Packages load their names on first use (ssa_hf.lazy): every name in __all__ must resolve."""
    import importlib

    module = importlib.import_module(package)
    broken = []
    for name in getattr(module, "__all__", []):
        try:
            getattr(module, name)
        except (AttributeError, ImportError) as error:
            broken.append(f"{name}: {error}")
    assert not broken, f"{package}: {broken}"
