"""Fixtures of the reliability tests: planted code (a marker file appears if it ever runs), tiny corpora and
configs shared with the training tests."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from ..data.fixtures import documents, write_text
from ..evaluation import fixtures as eval_fixtures
from ..train.conftest import _datasets_cache, corpora, reference_runs, tiny_config  # noqa: F401  (fixtures)

@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """The inputs the evaluation commands read: a corpus, an lm-eval data folder and Zorro files."""
    root = tmp_path_factory.mktemp("inputs")
    return {
        "text": write_text(root / "corpus.txt", documents(20, per_document=4)),
        "data_dir": eval_fixtures.write_data(root / "data"),
        "zorro": eval_fixtures.write_zorro(root / "zorro"),
    }


PLANTED_CODE = """
import pathlib
pathlib.Path({marker!r}).write_text("planted code ran")
"""


class PlantedPickle:
    """Unpickling this object writes the marker file (what a malicious checkpoint file would do)."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"import pathlib; pathlib.Path({self.marker!r}).write_text('planted pickle ran')",))


def planted_pickle_bytes(marker: Path) -> bytes:
    return pickle.dumps(PlantedPickle(marker))


def plant_code(folder: Path, marker: Path, module: str = "planted") -> Path:
    """Write `<module>.py` (writes `marker` when imported) into `folder`."""
    (folder / f"{module}.py").write_text(PLANTED_CODE.format(marker=str(marker)))
    return folder / f"{module}.py"


def foreign_model_folder(folder: Path, marker: Path, task: str = "causal") -> Path:
    """A model folder of an unknown model type whose config.json and tokenizer_config.json point (auto_map) at
    planted code: loading it without trust_remote_code must refuse, never import the code."""
    folder.mkdir(parents=True, exist_ok=True)
    plant_code(folder, marker)
    head = "AutoModelForCausalLM" if task == "causal" else "AutoModelForMaskedLM"
    config = {
        "model_type": "planted_model",
        "architectures": ["PlantedForCausalLM" if task == "causal" else "PlantedForMaskedLM"],
        "auto_map": {"AutoConfig": "planted.PlantedConfig", head: "planted.PlantedModel",
                     "AutoModel": "planted.PlantedModel"},
    }
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PlantedTokenizer", "auto_map": {"AutoTokenizer": ["planted.PlantedTokenizer", None]},
    }))
    return folder


def lookalike_folder(source: Path, folder: Path, marker: Path) -> Path:
    """A copy of a real ssa-hf checkpoint whose shipped remote code (every *.py, named by auto_map) is replaced
    by planted code: without trust_remote_code the installed classes load it and the planted code never runs."""
    import shutil

    shutil.copytree(source, folder)
    config = json.loads((folder / "config.json").read_text())
    assert config.get("auto_map"), "the fixture expects a checkpoint saved with its remote code"
    modules = {ref.split(".")[0] for ref in config["auto_map"].values() if isinstance(ref, str)}
    for module in modules | {p.stem for p in folder.glob("*.py")}:
        plant_code(folder, marker, module)
    return folder


@pytest.fixture
def marker(tmp_path) -> Path:
    return tmp_path / "MARKER_planted_code_ran"
