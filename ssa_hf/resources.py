"""The data files ssa-hf ships: the presets and configs (`configs/`) and the model-card templates
(`model_cards/`).

The repository keeps both at its top; the wheel carries them inside the package, under `ssa_hf/package_data/`
(copied there at build time by setup.py), so that a normal install (`pip install ssa-hf`, `pip install .`) works
from any folder. `shipped_folder` finds one: `$SSA_HF_CONFIGS_DIR` / `$SSA_HF_MODEL_CARDS_DIR` when set, else
the package's copy, else the checkout's folder beside the package (an editable install). `config_file(path)`
resolves a config path as the docs write it (`configs/pretrain/tiny_causal.yaml`): the file in the working
directory when there is one, else the shipped copy.

Importing this module is light (no torch).
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

CONFIGS_ENV = "SSA_HF_CONFIGS_DIR"
MODEL_CARDS_ENV = "SSA_HF_MODEL_CARDS_DIR"
# the repository's top-level folders that the wheel carries (setup.py copies exactly these)
SHIPPED_FOLDERS = ("configs", "model_cards")
PACKAGE_SUBFOLDER = "package_data"


def shipped_folder(name: str, env: str, alternative: str) -> Path:
    """`$env`, else the package's copy of the folder `name` (a wheel), else the one beside the package (a
    checkout); `alternative` says what else the caller accepts when none exists."""
    override = os.environ.get(env)
    if override:
        path = Path(override).expanduser()
        if not path.is_dir():
            raise FileNotFoundError(f"{env}={override!r} is not a folder; point it at the {name}/ folder")
        return path
    packaged = Path(str(resources.files("ssa_hf").joinpath(PACKAGE_SUBFOLDER, name)))
    if packaged.is_dir():
        return packaged
    checkout = Path(__file__).resolve().parents[1] / name
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError(
        f"no {name}/ folder in the installed package ({packaged}) nor beside it ({checkout}): this installation "
        f"is incomplete (reinstall ssa-hf), or set {env} to the {name}/ folder of an ssa-hf checkout, or {alternative}"
    )


def configs_dir() -> Path:
    """The `configs/` folder: `$SSA_HF_CONFIGS_DIR`, else the one shipped with the package."""
    return shipped_folder("configs", CONFIGS_ENV, "pass a config file path")


def model_cards_dir() -> Path:
    """The `model_cards/` folder: `$SSA_HF_MODEL_CARDS_DIR`, else the one shipped with the package."""
    return shipped_folder("model_cards", MODEL_CARDS_ENV, "pass template=PATH")


def config_file(path: str | os.PathLike) -> Path:
    """`path` when it exists; else, for a path under `configs/` (as the docs write them), the shipped copy;
    else `path` unchanged (the caller reports it missing)."""
    given = Path(path).expanduser()
    if given.exists() or given.is_absolute():
        return given
    parts = given.parts
    if len(parts) > 1 and parts[0] == "configs":
        try:
            shipped = configs_dir().joinpath(*parts[1:])
        except FileNotFoundError:
            return given
        if shipped.exists():
            return shipped
    return given
