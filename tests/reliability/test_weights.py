"""Weights are what they say before we report on them: `eval`, `perplexity` and `probe` refuse a model whose weight
files lack tensors its config.json needs (transformers would fill them with random values), hold tensors it has no
place for, belong to another model (a config.json of another family), or hold NaN / infinite values - in one line
naming the tensor - unless the user passes --allow-weight-mismatch / --allow-nonfinite-weights; the results then
record it and `compare` refuses them without the same option. `convert` refuses non-finite weights. A safetensors
index naming a pickle shard is refused before any load (`ssa_hf.hub.folders.check_weight_index`).

Each case failed before: the commands exited 0 with random or NaN weights (eval reported accuracies, probe 0 %).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from ssa_hf.cli import main

from ..evaluation import fixtures as eval_fixtures
from .conftest import planted_pickle_bytes


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("weights")
    causal_tok, masked_tok = eval_fixtures.tokenizer(masked=False), eval_fixtures.tokenizer(masked=True)
    return {
        "causal": eval_fixtures.save(eval_fixtures.causal_lm(causal_tok, scoring="softmax"), causal_tok, root / "causal"),
        "ssa": eval_fixtures.save(eval_fixtures.causal_lm(causal_tok, scoring="ssa"), causal_tok, root / "ssa"),
        "masked": eval_fixtures.save(eval_fixtures.masked_lm(masked_tok), masked_tok, root / "masked"),
    }


def command(name: str, folder: Path, inputs, out: Path) -> list[str]:
    return {
        "perplexity": ["perplexity", str(folder), "--data", str(inputs["text"]), "--windows", "2", "--window-length",
                       "8", "--device", "cpu", "--output-dir", str(out)],
        "eval": ["eval", str(folder), "--data-dir", str(inputs["data_dir"]), "--tasks", "arc_easy", "--limit", "2",
                 "--device", "cpu", "--output-dir", str(out)],
        "probe": ["probe", str(folder), "--zorro-dir", str(inputs["zorro"]), "--paradigms",
                  eval_fixtures.ZORRO_PARADIGMS[0], "--limit", "1", "--device", "cpu", "--no-progress",
                  "--output-dir", str(out)],
        "convert": ["convert", str(folder), str(out), "--attention-scoring", "ssa"],
    }[name]


RESULT_FILE = {"perplexity": "perplexity.json", "eval": "eval.json", "probe": "probe.json"}


def _edit_weights(folder: Path, edit) -> None:
    tensors = load_file(folder / "model.safetensors")
    edit(tensors)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})


def _set_value(name: str, value: float):
    def edit(tensors):
        tensors[name].view(-1)[0] = value
    return edit


def _other_family(folder: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="ssa_gpt2", architectures=["SSAGPT2LMHeadModel"])
    (folder / "config.json").write_text(json.dumps(config))


DOWN = "model.layers.0.mlp.down_proj.weight"
# (id, the change to a copy of the checkpoint, what the one-line error says, the option that lets it by)
DAMAGES = [
    ("missing tensor", lambda f: _edit_weights(f, lambda t: t.pop(DOWN)),
     f"do not match its config.json (SSALlamaForCausalLM): missing {DOWN}", "--allow-weight-mismatch"),
    ("unexpected tensor", lambda f: _edit_weights(f, lambda t: t.update({"model.layers.7.extra.weight": torch.ones(2, 2)})),
     "unexpected model.layers.7.extra.weight", "--allow-weight-mismatch"),
    ("config of another family", _other_family,
     "config.json (model_type 'ssa_gpt2', SSAGPT2LMHeadModel) does not describe these weights", "--allow-weight-mismatch"),
    ("nan weight", lambda f: _edit_weights(f, _set_value(DOWN, float("nan"))),
     f"weight {DOWN} holds NaN or infinite values", "--allow-nonfinite-weights"),
    ("inf weight", lambda f: _edit_weights(f, _set_value("model.norm.weight", float("inf"))),
     "weight model.norm.weight holds NaN or infinite values", "--allow-nonfinite-weights"),
]


def _damaged(checkpoints, kind: str, change, tmp_path: Path) -> Path:
    folder = tmp_path / "damaged"
    shutil.copytree(checkpoints[kind], folder)
    change(folder)
    return folder


def _error_line(name: str, err: str) -> str:
    """The command's one-line error (transformers' own load report, above it on stderr, may say more)."""
    lines = [line for line in err.splitlines() if line.startswith(f"ssa-hf {name}: error:")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("name", ["perplexity", "eval", "probe"])
@pytest.mark.parametrize("damage", DAMAGES, ids=[d[0] for d in DAMAGES])
def test_weights_that_are_not_what_they_say_are_refused_naming_the_tensor(name, damage, checkpoints, inputs, tmp_path,
                                                                         capsys):
    _, change, message, flag = damage
    folder = _damaged(checkpoints, "causal", change, tmp_path)
    out = tmp_path / "out"
    assert main(command(name, folder, inputs, out)) == 2
    error = _error_line(name, capsys.readouterr().err)
    assert message in error and flag in error, error
    assert not (out / RESULT_FILE[name]).exists()


def test_a_masked_lm_with_a_nan_weight_is_not_probed(checkpoints, inputs, tmp_path, capsys):
    name = "roberta.encoder.layer.0.attention.self.query.weight"
    folder = _damaged(checkpoints, "masked", lambda f: _edit_weights(f, _set_value(name, float("nan"))), tmp_path)
    assert main(command("probe", folder, inputs, tmp_path / "out")) == 2
    err = _error_line("probe", capsys.readouterr().err)
    assert f"weight {name} holds NaN" in err and "--allow-nonfinite-weights" in err, err


def test_float16_overflow_of_a_weight_is_caught_as_loaded(checkpoints, inputs, tmp_path, capsys):
    """A float32 weight beyond float16's range is finite in the file and infinite as evaluated in float16."""
    folder = _damaged(checkpoints, "causal", lambda f: _edit_weights(f, _set_value(DOWN, 1e6)), tmp_path)
    argv = command("perplexity", folder, inputs, tmp_path / "out")
    assert main(argv) == 0  # float32: finite
    capsys.readouterr()
    assert main(argv + ["--dtype", "float16"]) == 2
    assert "(as loaded, dtype torch.float16)" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["perplexity", "eval", "probe"])
def test_the_option_runs_it_records_it_and_compare_refuses_it_without_the_option(name, checkpoints, inputs, tmp_path,
                                                                                 capsys):
    """Positive control of the refusals above, and compare: the results of weights let by are never tabulated
    without the same option, and noted in the report with it."""
    folder = _damaged(checkpoints, "causal", lambda f: _edit_weights(f, lambda t: t.pop(DOWN)), tmp_path)
    out = tmp_path / "out"
    assert main(command(name, folder, inputs, out) + ["--allow-weight-mismatch"]) == 0
    result = json.loads((out / RESULT_FILE[name]).read_text())
    record = result[0] if isinstance(result, list) else result["model"]
    assert record["weight_problems"] == {"missing": [DOWN]}
    capsys.readouterr()
    report = tmp_path / "report"
    assert main(["compare", str(out / RESULT_FILE[name]), "--output-dir", str(report)]) == 2
    err = capsys.readouterr().err
    assert "not what its folder says (missing " + DOWN in err and "--allow-weight-mismatch" in err, err
    assert not (report / "compare.md").exists()
    assert main(["compare", str(out / RESULT_FILE[name]), "--output-dir", str(report), "--allow-weight-mismatch"]) == 0
    assert "evaluated on weights that are not what its folder says: missing " + DOWN in (report / "compare.md").read_text()


def test_intact_checkpoints_record_no_weight_problems(checkpoints, inputs, tmp_path):
    out = tmp_path / "out"
    assert main(command("eval", checkpoints["ssa"], inputs, out)) == 0
    assert "weight_problems" not in json.loads((out / "eval.json").read_text())["model"]


def test_convert_refuses_non_finite_weights(checkpoints, inputs, tmp_path, capsys):
    folder = _damaged(checkpoints, "causal", lambda f: _edit_weights(f, _set_value(DOWN, float("nan"))), tmp_path)
    out = tmp_path / "converted"
    assert main(command("convert", folder, inputs, out)) == 2
    err = _error_line("convert", capsys.readouterr().err)
    assert f"weight {DOWN} holds NaN" in err and "--allow" not in err, err
    assert not out.exists()


@pytest.mark.parametrize("name", ["perplexity", "eval", "probe", "convert"])
def test_an_index_naming_a_pickle_shard_is_refused_before_any_load(name, checkpoints, inputs, marker, tmp_path,
                                                                   capsys):
    """model.safetensors.index.json naming a `.bin` shard beside real safetensors shards: transformers would hand
    that pickle to torch's (restricted) unpickler despite use_safetensors=True. Refused in one line; torch.load is
    never called."""
    folder = tmp_path / "indexed"
    shutil.copytree(checkpoints["causal"], folder)
    (folder / "model.safetensors").rename(folder / "model-00001-of-00002.safetensors")
    names = list(load_file(folder / "model-00001-of-00002.safetensors"))
    weight_map = {key: "model-00001-of-00002.safetensors" for key in names}
    weight_map[names[0]] = "model-00002-of-00002.bin"
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (folder / "model-00002-of-00002.bin").write_bytes(planted_pickle_bytes(marker))
    opened = []
    original = torch.load
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch, "load", lambda *a, **k: opened.append(a) or original(*a, **k))
        outcome = main(command(name, folder, inputs, tmp_path / "out"))
    err = capsys.readouterr().err
    assert outcome == 2 and "model-00002-of-00002.bin" in err and "not a .safetensors file of this folder" in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert not opened and not marker.exists()


def test_an_index_naming_a_shard_outside_the_folder_is_refused(checkpoints, tmp_path):
    from ssa_hf.hub.folders import PickledWeightsError, check_weight_files

    folder = tmp_path / "indexed"
    shutil.copytree(checkpoints["causal"], folder)
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {DOWN: "../elsewhere/model.safetensors"}}))
    with pytest.raises(PickledWeightsError, match=r"'\.\./elsewhere/model\.safetensors', which is not a \.safetensors "
                                                  r"file of this folder"):
        check_weight_files(folder)


def test_a_scoring_parameter_converted_on_load_is_not_a_mismatch(checkpoints, inputs, tmp_path):
    """config.json asking for another form of a saved scoring parameter (b learnable in the file, fixed in the
    config): the installed classes convert the saved value, so nothing is missing or random."""
    folder = _damaged(checkpoints, "ssa", lambda f: None, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "ssa_learn_b": False}))
    out = tmp_path / "out"
    assert main(command("perplexity", folder, inputs, out)) == 0
    assert json.loads((out / "perplexity.json").read_text())[0]["weight_problems"] is None
