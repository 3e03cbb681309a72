"""One rule for every folder a command writes, replaces or deletes, checked for every command through one runner:
a link planted in the output folder (at any depth: a run folder, a data file, a log, a results file) is refused
before anything changes, and so is a destination that holds, equals or lies inside its source, or that the
command did not write. Each case runs the command line on a tiny setup and compares the whole test folder
(files, links and folders, inside and outside the output folder) before and after: nothing may change."""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import yaml

from ssa_hf.cli import main

from ..data.fixtures import documents, write_jsonl, write_text
from ..evaluation import fixtures as eval_fixtures
from ..hub.helpers import make_llama
from .conftest import tiny_config

LINK = "symbolic link"


@pytest.fixture(scope="module")
def shared(tmp_path_factory, corpora):
    """Made once: tiny model folders (causal, masked), evaluation data, Zorro files, a web-text corpus, a Llama."""
    root = tmp_path_factory.mktemp("shared")
    causal_tok, masked_tok = eval_fixtures.tokenizer(masked=False), eval_fixtures.tokenizer(masked=True)
    data = eval_fixtures.write_data(root / "data")
    return {
        "causal": eval_fixtures.save(eval_fixtures.causal_lm(causal_tok, "ssa"), causal_tok, root / "causal"),
        "masked": eval_fixtures.save(eval_fixtures.masked_lm(masked_tok, "ssa"), masked_tok, root / "masked"),
        "data": data, "zorro": eval_fixtures.write_zorro(root / "zorro"),
        "web": write_jsonl(root / "web.jsonl.gz", documents(150, per_document=8, seed=0), gz=True),
        "text": write_text(root / "ood.txt", [" ".join(["the cat sat on the mat"] * 8)] * 10),
        "llama": make_llama(root / "llama") and root / "llama", "corpora": corpora,
    }


@dataclass
class Env:
    tmp: Path
    out: Path  # the command's output folder
    outside: Path  # a folder of the user's that must not change
    shared: dict

    def link(self, name: str, target: Path) -> Path:
        path = self.out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(target, target_is_directory=target.is_dir())
        return path

    def another_run(self) -> Path:
        """A training run folder of the user's: checkpoints and a final model."""
        run = self.tmp / "other_run"
        for step in (1, 2):
            (run / "checkpoints" / f"checkpoint-{step}").mkdir(parents=True)
            (run / "checkpoints" / f"checkpoint-{step}" / "model.safetensors").write_bytes(b"weights %d" % step)
        (run / "final").mkdir()
        (run / "final" / "config.json").write_text("{}")
        return run

    def yaml(self, name: str, values: dict) -> str:
        path = self.tmp / name
        path.write_text(yaml.safe_dump(values))
        return str(path)


def _pretrain_yaml(env: Env, out: Path | None = None) -> str:
    config = tiny_config("causal", env.shared["corpora"], out or env.out)
    (env.tmp / "pretrain.yaml").write_text(config.to_yaml())
    return str(env.tmp / "pretrain.yaml")


def _uptrain_yaml(env: Env, pretrained: Path, out: Path | None = None) -> str:
    values = yaml.safe_load(Path(_pretrain_yaml(env, out)).read_text())
    values["model"] = {"pretrained": str(pretrained)}
    values.pop("tokenizer", None)
    return env.yaml("uptrain.yaml", values)


def _demo_argv(env: Env) -> list[str]:
    return ["uptrain-demo", "--output-dir", str(env.out), "--train-path", str(env.shared["web"]), "--max-documents",
            "150", "--validation-documents", "20", "--block-size", "32", "--vocab-size", "300", "--source-steps", "2",
            "--uptrain-steps", "2", "--eval-steps", "1", "--seeds", "0", "--scoring-learning-rates", "0.05",
            "--batch-size", "4"]


ICL = {"name": "test", "tasks": ["every"], "attention_scoring": ["softmax"], "seeds": [0],
       "model": {"layers": 1, "heads": 2, "width": 16, "max_points": 32},
       "train": {"steps": 2, "batch_size": 8, "warmup_steps": 0, "checkpoint_every": 1, "log_every": 1,
                 "curriculum": {"start": 5, "end": 7, "increment": 2, "interval": 1}},
       "eval": {"sigmas": [1, 8], "lengths": [6, 12], "batches": 1, "batch_size": 8},
       "stats": {"primary": {"min_value": 8}, "bootstrap_resamples": 100}, "threads": 1}


def _icl_argv(env: Env) -> list[str]:
    return ["icl", "--config", env.yaml("icl.yaml", ICL), "--output-dir", str(env.out)]


def _reproduce_argv(env: Env) -> list[str]:
    from ..reproduce.test_pipeline import tiny_config as reproduce_config

    return ["reproduce", "--config", env.yaml("reproduce.yaml", reproduce_config(env.tmp / "setup")), "--output-dir",
            str(env.out), "--confirmatory-only"]


def _eval_argv(env: Env, *models: Path, names: str | None = None) -> list[str]:
    return ["eval", *map(str, models or [env.shared["causal"]]), "--data-dir", str(env.shared["data"]), "--tasks",
            "boolq", "--limit", "2", "--batch-size", "2", "--device", "cpu", "--output-dir", str(env.out),
            *(["--names", names] if names else [])]


def _plant_task_folder(env: Env) -> None:
    """OUT/lm_eval_tasks a link to the user's folder, with a manifest naming the user's file as written by ssa-hf
    (what a planted folder would hold to have it emptied)."""
    import hashlib

    digest = hashlib.sha256((env.outside / "notes.txt").read_bytes()).hexdigest()
    (env.outside / "ssa_hf_tasks.json").write_text(json.dumps({"written_by": "ssa-hf eval", "files": {"notes.txt": digest}}))
    env.link("lm_eval_tasks", env.outside)


def _compare_argv(env: Env) -> list[str]:
    records = [{"model": "/runs/a", "data": "wikitext", "windows": 10, "mean_nll": 4.8, "perplexity": 120.5}]
    (env.tmp / "ppl").mkdir()
    (env.tmp / "ppl" / "perplexity.json").write_text(json.dumps(records))
    return ["compare", str(env.tmp / "ppl"), "--output-dir", str(env.out)]


def _convert_models(env: Env) -> Path:
    """models/llama (the source) beside models/other (a sibling folder of the user's)."""
    models = env.tmp / "models"
    shutil.copytree(env.shared["llama"], models / "llama")
    (models / "other").mkdir()
    (models / "other" / "keep.txt").write_text("keep me")
    return models


@dataclass
class Case:
    plant: Callable[[Env], object]  # sets the trap; its return value is passed to argv
    argv: Callable[[Env, object], list[str]]
    message: str  # a regular expression the one-line error matches


CASES = {
    # training runs: any file of the run folder, and a source the run would replace
    "pretrain: OUT/log_history.jsonl links out": Case(
        lambda e: e.link("log_history.jsonl", e.outside / "notes.txt"),
        lambda e, _: ["pretrain", "--config", _pretrain_yaml(e)], LINK),
    "pretrain --overwrite_output_dir: OUT has checkpoints/ but is no run folder": Case(
        lambda e: ((e.out / "checkpoints" / "step-00000001").mkdir(parents=True),
                   (e.out / "checkpoints" / "step-00000001" / "keep.bin").write_bytes(b"the user's")),
        lambda e, _: ["pretrain", "--config", _pretrain_yaml(e), "--overwrite_output_dir"], "not a run folder"),
    "uptrain: model.pretrained lies inside OUT (its final/)": Case(
        lambda e: shutil.copytree(e.shared["causal"], e.out / "final"),
        lambda e, _: ["pretrain", "--config", _uptrain_yaml(e, e.out / "final")], "holds the source"),
    "uptrain: OUT lies inside model.pretrained": Case(
        lambda e: shutil.copytree(e.shared["causal"], e.tmp / "base"),
        lambda e, _: ["pretrain", "--config", _uptrain_yaml(e, e.tmp / "base", e.tmp / "base" / "run")],
        "lies inside the source"),
    "uptrain-demo: OUT/source links to another run folder": Case(
        lambda e: e.link("source", e.another_run()), lambda e, _: _demo_argv(e), LINK),
    "uptrain-demo: OUT/data/train.jsonl links out": Case(
        lambda e: e.link("data/train.jsonl", e.outside / "notes.txt"), lambda e, _: _demo_argv(e), LINK),
    "uptrain-demo: OUT/runs/<run> links to another run inside OUT": Case(
        lambda e: (e.another_run(), shutil.copytree(e.tmp / "other_run", e.out / "kept"),
                   e.link("source", e.out / "kept")),
        lambda e, _: _demo_argv(e), LINK),
    "icl: OUT/runs links out": Case(
        lambda e: ((e.outside / "checkpoint").mkdir(), e.link("runs", e.outside)), lambda e, _: _icl_argv(e), LINK),
    "icl: OUT/runs/<run> links out": Case(
        lambda e: ((e.outside / "checkpoint").mkdir(), e.link("runs/every-softmax-seed0", e.outside)),
        lambda e, _: _icl_argv(e), LINK),
    "reproduce: a run's run.log links out": Case(
        lambda e: e.link("causal/softmax-seed0/run.log", e.outside / "notes.txt"),
        lambda e, _: _reproduce_argv(e), LINK),
    # convert: a destination link, overlaps with the source, a folder convert did not write
    "convert: DST links to a folder (--overwrite)": Case(
        lambda e: ((e.outside / "ssa_conversion.json").write_text("{}"), e.link("dst", e.outside)),
        lambda e, _: ["convert", str(e.shared["llama"]), str(e.out / "dst"), "--overwrite"], LINK),
    "convert: SRC inside DST (convert models/llama models --overwrite)": Case(
        _convert_models, lambda e, models: ["convert", str(models / "llama"), str(models), "--overwrite"],
        "holds the source"),
    "convert: DST inside SRC": Case(
        _convert_models, lambda e, models: ["convert", str(models / "llama"), str(models / "llama" / "ssa")],
        "lies inside the source"),
    "convert: DST is SRC (--overwrite)": Case(
        _convert_models, lambda e, models: ["convert", str(models / "llama"), str(models / "llama"), "--overwrite"],
        "is the source"),
    "convert: DST a folder convert did not write (--overwrite)": Case(
        lambda e: None, lambda e, _: ["convert", str(e.shared["llama"]), str(e.outside), "--overwrite"],
        "not a folder ssa-hf wrote"),
    "export: --output links to a folder (--overwrite)": Case(
        lambda e: e.link("exported", e.outside),
        lambda e, _: ["export", str(e.shared["causal"]), "--output", str(e.out / "exported"), "--overwrite",
                      "--format", "pt2"], LINK),
    "export: --output a folder export did not write (--overwrite)": Case(
        lambda e: None, lambda e, _: ["export", str(e.shared["causal"]), "--output", str(e.outside), "--overwrite",
                      "--format", "pt2"],
        "not a folder ssa-hf wrote"),
    # evaluation results
    "eval --write-tasks: DIR links to a folder": Case(
        _plant_task_folder, lambda e, _: ["eval", "--data-dir", str(e.shared["data"]), "--tasks", "boolq",
                                          "--write-tasks", str(e.out / "lm_eval_tasks")], "symbolic link"),
    "eval: OUT/lm_eval_tasks links out": Case(_plant_task_folder, lambda e, _: _eval_argv(e), LINK),
    "eval: OUT/<name> links out (two models)": Case(
        lambda e: e.link("b", e.outside),
        lambda e, _: _eval_argv(e, e.shared["causal"], e.shared["causal"], names="a,b"), LINK),
    "eval: OUT/eval.json links out": Case(
        lambda e: e.link("eval.json", e.outside / "notes.txt"), lambda e, _: _eval_argv(e), LINK),
    "probe: OUT/probe.json links out": Case(
        lambda e: e.link("probe.json", e.outside / "notes.txt"),
        lambda e, _: ["probe", str(e.shared["masked"]), "--zorro-dir", str(e.shared["zorro"]), "--limit", "2",
                      "--device", "cpu", "--no-progress", "--output-dir", str(e.out)], LINK),
    "perplexity: OUT/perplexity.json links out": Case(
        lambda e: e.link("perplexity.json", e.outside / "notes.txt"),
        lambda e, _: ["perplexity", str(e.shared["causal"]), "--data", str(e.shared["text"]), "--windows", "2",
                      "--window-length", "8", "--device", "cpu", "--output-dir", str(e.out)], LINK),
    "compare: OUT/compare.md links out": Case(
        lambda e: e.link("compare.md", e.outside / "notes.txt"), lambda e, _: _compare_argv(e), LINK),
    "demo: OUT/demo.md links out": Case(
        lambda e: e.link("demo.md", e.outside / "notes.txt"), lambda e, _: ["demo", "--output-dir", str(e.out)], LINK),
    # push writes the card into the folder it publishes: a README.md linked out is refused, never written through
    "push: README.md links out (--refresh-card)": Case(
        lambda e: (shutil.copytree(e.shared["causal"], e.out, dirs_exist_ok=True), (e.out / "README.md").unlink(missing_ok=True),
                   e.link("README.md", e.outside / "notes.txt")),
        lambda e, _: ["push", str(e.out), "someone/x", "--dry-run", "--refresh-card"], "leading out of the folder"),
}


def snapshot(root: Path) -> dict[str, object]:
    """Every folder, link (its target) and file (its bytes) under `root`, walked without following links."""
    seen: dict[str, object] = {}
    for parent, dirs, files in os.walk(root, followlinks=False):
        for name in dirs + files:
            path = Path(parent) / name
            key = path.relative_to(root).as_posix()
            seen[key] = (("link", os.readlink(path)) if path.is_symlink() else
                         ("folder",) if path.is_dir() else ("file", path.read_bytes()))
    return seen


@pytest.mark.parametrize("case", sorted(CASES))
def test_no_command_writes_through_a_link_or_over_its_source(case, shared, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = Env(tmp_path, tmp_path / "out", tmp_path / "precious", shared)
    env.out.mkdir()
    env.outside.mkdir()
    (env.outside / "notes.txt").write_text("keep me")
    planted = CASES[case].plant(env)
    argv = CASES[case].argv(env, planted)
    before = snapshot(tmp_path)
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, f"{case}: exit {code}, expected a refusal; stderr:\n{err[-2000:]}"
    last = err.strip().splitlines()[-1]  # (progress bars of model loading may come before it)
    assert last.startswith(f"ssa-hf {argv[0]}: error:") and re.search(CASES[case].message, last), err[-2000:]
    after = snapshot(tmp_path)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"{case}: changed before the refusal: {changed[:10]}"


# configuration values are never environment-expanded (only ${SSA_HF_DATA_DIR} and ~ in paths, documented)
@pytest.mark.parametrize("spelling", ["$HF_TOKEN", "${HF_TOKEN}"])
def test_a_config_never_expands_a_secret_into_an_error(spelling, corpora, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value_123")
    config = tiny_config("causal", corpora, tmp_path / "run", data={"train": {"path": f"{spelling}/train.jsonl"}})
    (tmp_path / "run.yaml").write_text(config.to_yaml())
    assert main(["pretrain", "--config", str(tmp_path / "run.yaml")]) == 2
    err = capsys.readouterr().err
    assert "hf_secret_value_123" not in err and f"{spelling}/train.jsonl" in err, err
