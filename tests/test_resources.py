"""The data files ssa-hf ships (resources.py): the wheel carries configs/ and model_cards/ inside the package, and a
non-editable install finds them from any folder (issue 26: `pip install .` had neither, so `params`, `pretrain`
and `convert` failed). The full check, every command from a wheel in a fresh venv, is in CI (scripts/smoke_installed.sh)."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ssa_hf import resources

from .conftest import REPO


def _repository_files(name: str) -> set[str]:
    return {p.relative_to(REPO).as_posix() for p in (REPO / name).rglob("*") if p.is_file() and "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out, source = tmp_path_factory.mktemp("wheel"), tmp_path_factory.mktemp("source")
    # a copy of what the build reads, so that its build/ and egg-info stay out of the checkout
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copy(REPO / name, source / name)
    for name in ("ssa_hf", *resources.SHIPPED_FOLDERS):
        shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(source)],
        capture_output=True, text=True, timeout=300, cwd=source,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (wheel_file,) = out.glob("ssa_hf-*.whl")
    return wheel_file


def test_setup_copies_the_folders_resources_reads():
    tree = ast.parse((REPO / "setup.py").read_text())
    value = next(node.value for node in tree.body if isinstance(node, ast.Assign)
                 and any(getattr(t, "id", None) == "SHIPPED_FOLDERS" for t in node.targets))
    assert ast.literal_eval(value) == resources.SHIPPED_FOLDERS


def test_the_wheel_carries_every_config_and_card_template(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder in resources.SHIPPED_FOLDERS:
        expected = {f"ssa_hf/{resources.PACKAGE_SUBFOLDER}/{path}" for path in _repository_files(folder)}
        assert expected and expected <= names, sorted(expected - names)[:5]


def test_commands_read_the_wheels_copy_from_another_folder(wheel, tmp_path):
    """The unpacked wheel, first on the path, in a folder without configs/: presets, config paths as the docs
    write them and the card template all resolve to the package's copy."""
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    work = tmp_path / "elsewhere"
    work.mkdir()
    script = (
        "import ssa_hf, sys\n"
        "from ssa_hf.resources import configs_dir, model_cards_dir, config_file\n"
        f"assert ssa_hf.__file__.startswith({str(site)!r}), ssa_hf.__file__\n"
        "print(configs_dir()); print(model_cards_dir()); print(config_file('configs/pretrain/tiny_causal.yaml'))\n"
        "from ssa_hf.cli import main\n"
        "sys.exit(main(['params', 'tiny_llama']))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SSA_HF_")}
    env["PYTHONPATH"] = str(site)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=work, env=env,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    packaged = site / "ssa_hf" / resources.PACKAGE_SUBFOLDER
    assert lines[:3] == [str(packaged / "configs"), str(packaged / "model_cards"),
                         str(packaged / "configs" / "pretrain" / "tiny_causal.yaml")]
    assert any(line.startswith("| tiny_llama") for line in lines)


def test_a_config_path_prefers_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resources.config_file("configs/pretrain/tiny_causal.yaml") == REPO / "configs" / "pretrain" / "tiny_causal.yaml"
    (tmp_path / "configs" / "pretrain").mkdir(parents=True)
    (tmp_path / "configs" / "pretrain" / "tiny_causal.yaml").write_text("task: causal\n")
    assert resources.config_file("configs/pretrain/tiny_causal.yaml") == Path("configs/pretrain/tiny_causal.yaml")
    assert resources.config_file("configs/none.yaml") == Path("configs/none.yaml")  # missing: the caller says so


def test_an_incomplete_install_says_what_to_do(monkeypatch, tmp_path):
    monkeypatch.setattr(resources, "__file__", str(tmp_path / "pkg" / "resources.py"))
    monkeypatch.setattr(resources, "PACKAGE_SUBFOLDER", "no_such_folder")
    with pytest.raises(FileNotFoundError, match="reinstall ssa-hf.*SSA_HF_CONFIGS_DIR"):
        resources.configs_dir()
