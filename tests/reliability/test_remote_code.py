"""No code from a model folder runs unless the user asks (`--trust-remote-code`).

Two planted folders per model kind: a foreign model type whose config.json / tokenizer_config.json point (auto_map)
at planted code, which every command must refuse; and a copy of a real ssa-hf checkpoint whose shipped remote-code
files were replaced by planted code, which every command must load with the installed classes. The planted code
writes a marker file when imported: it must never appear. A positive control shows the marker does appear when
the user passes --trust-remote-code, so the test can fail.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ssa_hf.cli import main

from ..data.fixtures import documents, write_text
from ..evaluation import fixtures as eval_fixtures
from .conftest import foreign_model_folder, lookalike_folder, tiny_config


@pytest.fixture(scope="module")
def real_checkpoints(tmp_path_factory):
    """A causal (ssa_llama) and a masked (ssa_bert) ssa-hf checkpoint with remote code, tokenizer and card."""
    from ssa_hf.hub import save_checkpoint_folder

    root = tmp_path_factory.mktemp("real")
    causal_tok, masked_tok = eval_fixtures.tokenizer(masked=False), eval_fixtures.tokenizer(masked=True)
    return {
        "causal": save_checkpoint_folder(eval_fixtures.causal_lm(causal_tok), root / "causal", tokenizer=causal_tok),
        "masked": save_checkpoint_folder(eval_fixtures.masked_lm(masked_tok), root / "masked", tokenizer=masked_tok),
    }


def _pretrain_config(folder: Path, tmp_path: Path) -> Path:
    corpora = {"causal": write_text(tmp_path / "train.txt", documents(60, per_document=4))}
    config = tiny_config("causal", corpora, tmp_path / "run", max_steps=1, eval_steps=0, save_steps=0,
                         tokenizer={"pretrained": str(folder)})
    path = tmp_path / "pretrain.yaml"
    path.write_text(config.to_yaml())
    return path


def command(name: str, folder: Path, inputs, tmp_path: Path) -> list[str]:
    out = str(tmp_path / f"out_{name}")
    return {
        "perplexity": ["perplexity", str(folder), "--data", str(inputs["text"]), "--windows", "2",
                       "--window-length", "8", "--device", "cpu"],
        "eval": ["eval", str(folder), "--data-dir", str(inputs["data_dir"]), "--tasks", "arc_easy", "--limit", "2",
                 "--device", "cpu", "--output-dir", out],
        "probe": ["probe", str(folder), "--zorro-dir", str(inputs["zorro"]), "--paradigms",
                  eval_fixtures.ZORRO_PARADIGMS[0], "--limit", "1", "--methods", "holistic", "--device", "cpu",
                  "--no-progress", "--output-dir", out],
        "convert": ["convert", str(folder), out, "--attention-scoring", "softmax"],
        "push": ["push", str(folder), "someone/model", "--dry-run", "--no-validate-online"],
        "pretrain": ["pretrain", "--config", str(_pretrain_config(folder, tmp_path))],
    }[name]


KIND = {"perplexity": "causal", "eval": "causal", "probe": "masked", "convert": "causal", "push": "causal",
        "pretrain": "causal"}
COMMANDS = list(KIND)


def _run(argv: list[str]) -> int | str:
    try:
        return main(argv)
    except SystemExit as exit_:  # argparse
        return int(exit_.code or 0)
    except Exception as error:  # the library's own error is acceptable for a refusal; planted code is not
        return f"{type(error).__name__}: {error}"


@pytest.mark.parametrize("name", COMMANDS)
def test_a_foreign_model_folder_is_refused_without_running_its_code(name, inputs, marker, tmp_path, capsys):
    folder = foreign_model_folder(tmp_path / "foreign", marker, KIND[name])
    outcome = _run(command(name, folder, inputs, tmp_path))
    assert outcome != 0, f"{name} accepted a model folder of an unknown type"
    assert not marker.exists(), f"{name} ran the folder's planted code"
    if name in ("perplexity", "eval", "probe", "pretrain"):  # the loaders: the refusal says what to pass
        message = outcome if isinstance(outcome, str) else capsys.readouterr().err
        assert "trust_remote_code" in message or "trust-remote-code" in message, message


@pytest.mark.parametrize("name", COMMANDS)
def test_an_ssa_hf_folder_loads_with_the_installed_code_not_its_own(name, real_checkpoints, inputs, marker, tmp_path):
    folder = lookalike_folder(real_checkpoints[KIND[name]], tmp_path / "lookalike", marker)
    outcome = _run(command(name, folder, inputs, tmp_path))
    # push refuses to publish the planted files (tests/reliability/test_publishing.py); the others load and run
    assert outcome == (2 if name == "push" else 0), outcome
    assert not marker.exists(), f"{name} ran the checkpoint's own (planted) code instead of the installed classes"
    if name == "convert":  # the converted folder ships the installed remote code, not the planted files
        written = list((tmp_path / "out_convert").glob("*.py"))
        assert written and not any("planted" in p.read_text() for p in written)


def test_the_flag_does_run_the_folders_code(inputs, marker, tmp_path, monkeypatch):
    """Positive control: with --trust-remote-code the planted code runs (so the tests above can fail)."""
    import transformers.dynamic_module_utils as dynamic

    monkeypatch.setattr(dynamic, "HF_MODULES_CACHE", str(tmp_path / "modules"))
    monkeypatch.setattr(sys, "path", list(sys.path))
    folder = foreign_model_folder(tmp_path / "foreign", marker)
    _run(command("perplexity", folder, inputs, tmp_path) + ["--trust-remote-code"])
    assert marker.exists()


def test_commands_offer_the_flag_and_default_to_off():
    from ssa_hf.cli import build_parser

    from ssa_hf.commands import config_from_args
    from ssa_hf.evaluation.config import EvalConfig, PerplexityConfig, ProbeConfig

    parser = build_parser()
    for name, config_class in (("perplexity", PerplexityConfig), ("eval", EvalConfig), ("probe", ProbeConfig)):
        argv = [name, "m"] + (["--zorro-dir", "z"] if name == "probe" else [])
        assert config_from_args(config_class, parser.parse_args(argv)).trust_remote_code is False
        assert config_from_args(config_class, parser.parse_args(argv + ["--trust-remote-code"])).trust_remote_code
    from ssa_hf.train import PretrainConfig

    assert PretrainConfig().trust_remote_code is False
    from ssa_hf.commands.pretrain import full_parser  # pretrain's options are parsed when it runs

    args = full_parser().parse_args(["--trust-remote-code"])
    assert args.trust_remote_code == "true"


PLANTED_TASK = """task: arc_easy
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: !function planted.doc_to_text
doc_to_target: 0
doc_to_choice: ["a", "b"]
"""


def test_eval_never_indexes_task_files_it_did_not_write(real_checkpoints, inputs, marker, tmp_path, capsys):
    """A planted YAML (with a `!function` and its .py) in OUT/lm_eval_tasks must not be indexed by lm-eval: it
    would win over ssa-hf's task and its code would run. The folder is refused; a rerun over ssa-hf's own files
    works."""
    from .conftest import plant_code

    argv = command("eval", real_checkpoints["causal"], inputs, tmp_path)
    tasks = tmp_path / "out_eval" / "lm_eval_tasks"
    assert main(argv) == 0 and main(argv) == 0  # a rerun empties and rewrites ssa-hf's own task folder
    capsys.readouterr()
    plant_code(tasks, marker)
    (tasks / "planted_arc.yaml").write_text(PLANTED_TASK.format(data=tasks / "x.jsonl"))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "did not write there" in err and "planted_arc.yaml" in err and "planted.py" in err
    assert not marker.exists(), "a planted task file's code ran"


@pytest.mark.parametrize("name", ["perplexity", "eval", "probe", "convert"])
def test_a_folder_with_only_pickled_weights_is_never_unpickled(name, real_checkpoints, inputs, marker, tmp_path, capsys):
    """pytorch_model.bin without safetensors: one line ("safetensors expected"), the file never opened."""
    import shutil

    from .conftest import planted_pickle_bytes

    folder = tmp_path / "pickled"
    shutil.copytree(real_checkpoints[KIND[name]], folder)
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(planted_pickle_bytes(marker))
    import torch

    opened = []
    original = torch.load
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch, "load", lambda *a, **k: opened.append(a) or original(*a, **k))
        outcome = _run(command(name, folder, inputs, tmp_path))
    err = capsys.readouterr().err
    assert outcome == 2 and "safetensors expected" in err and "pytorch_model.bin" in err, (outcome, err)
    assert len(err.strip().splitlines()) == 1, err
    assert not opened and not marker.exists()
