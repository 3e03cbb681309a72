"""Results that were silently wrong become a clear error or the right result (each test failed before):

- `--mixed_precision fp16` on a CPU trained in float32 while the run recorded fp16 (pretraining and ICL);
- `eval A B --names x,x` kept one eval.json; `--names ,` wrote both into OUT itself;
- `probe --kind causal` on a masked LM scored it with a bidirectional model (a log warning only);
- `compare` refused acc 1.5 as a number but tabulated the string "1.5";
- `icl --sigmas inf` / `1e39` (inf in float32) / `--eval.length_sweep_sigma inf` read a finite error for the cell;
- a same-size edit of a corpus with its old mtime kept was served from the `datasets` cache as the old text;
- a Zorro file starting with a UTF-8 byte-order mark changed the first sentence; an ARC record with duplicate
  labels was scored;
- HF `Trainer` put SSA's b and n in its weight-decay group (our loop exempts 1-D tensors).
"""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest
import torch

from ssa_hf.cli import main

from ..evaluation import fixtures as eval_fixtures
from .conftest import tiny_config
from .test_bad_values import one_line_error

# ------------------------------------------------------------------------------------------- mixed precision


def test_fp16_on_the_cpu_is_refused_before_the_run_starts(corpora, tmp_path):
    from ssa_hf.options import ConfigError
    from ssa_hf.train import pretrain

    config = tiny_config("causal", corpora, tmp_path / "run", mixed_precision="fp16", cpu=True)
    with pytest.raises(ConfigError, match=r"mixed_precision: fp16 needs a GPU .* Use bf16 \(CPU autocast\) or no"):
        pretrain(config)
    assert not (tmp_path / "run" / "training_config.yaml").exists() and not (tmp_path / "run" / "metrics.json").exists()


def test_accelerate_really_runs_fp16_on_the_cpu_in_float32():
    """Why the refusal: what accelerate does with fp16 on a CPU (if this ever changes, fp16 could be allowed)."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    # accelerate keeps one process-wide state: start from none, and leave none for the other tests' runs
    AcceleratorState._reset_state(reset_partial_state=True)
    try:
        accelerator = Accelerator(cpu=True, mixed_precision="fp16")
        layer = accelerator.prepare(torch.nn.Linear(4, 4))
        with accelerator.autocast():
            assert layer(torch.randn(2, 4)).dtype == torch.float32
        assert accelerator.mixed_precision == "fp16"  # ... while it reports fp16
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)


def test_icl_fp16_on_the_cpu_is_refused(tmp_path, capsys):
    err = one_line_error(["icl", "--output-dir", str(tmp_path / "icl"), "--steps", "1", "--seeds", "0", "--no-progress",
                          "--device", "cpu", "--train.mixed_precision", "fp16"], capsys)
    assert "train.mixed_precision: fp16 needs a GPU" in err and "Use bf16 (CPU autocast) or no" in err


# ------------------------------------------------------------------------------------------------ eval names


@pytest.mark.parametrize("names,message", [
    ("x,x", "--names: 'x' given twice; each model needs its own name"),
    (",", "--names: name 1 of 2 is empty"),
    ("a, ", "--names: name 2 of 2 is empty"),
    ("../a,b", "--names: '../a' cannot name a results folder"),
    ("..,b", "--names: '..' cannot name a results folder"),
])
def test_eval_refuses_names_that_would_share_or_leave_a_results_folder(names, message, tmp_path, capsys):
    out = tmp_path / "out"
    err = one_line_error(["eval", str(tmp_path / "a"), str(tmp_path / "b"), "--names", names, "--output-dir", str(out)],
                         capsys)
    assert message in err, err
    assert not out.exists()


# -------------------------------------------------------------------------------------------------- probe kind


@pytest.fixture(scope="module")
def probe_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("probe_models")
    causal_tok, masked_tok = eval_fixtures.tokenizer(masked=False), eval_fixtures.tokenizer(masked=True)
    return {
        "masked": eval_fixtures.save(eval_fixtures.masked_lm(masked_tok), masked_tok, root / "masked"),
        "causal": eval_fixtures.save(eval_fixtures.causal_lm(causal_tok), causal_tok, root / "causal"),
        "zorro": eval_fixtures.write_zorro(root / "zorro"),
    }


@pytest.mark.parametrize("model,kind,detected", [("masked", "causal", "mlm"), ("causal", "mlm", "causal")])
def test_probe_refuses_a_kind_that_is_not_the_models(model, kind, detected, probe_models, tmp_path, capsys):
    out = tmp_path / "out"
    err = one_line_error(["probe", str(probe_models[model]), "--zorro-dir", str(probe_models["zorro"]), "--kind", kind,
                          "--limit", "1", "--device", "cpu", "--no-progress", "--output-dir", str(out)], capsys)
    assert f"--kind {kind}: {probe_models[model]} is a" in err and f"Use --kind {detected} (or auto)" in err, err
    assert not (out / "probe.json").exists()


# ------------------------------------------------------------------------------------------ compare's figures


def _eval_result(value, stderr=0.1) -> dict:
    return {"kind": "lm_eval", "name": "m", "model": {"source": "m"}, "settings": {"num_fewshot": 0},
            "versions": {"lm_eval": "0.4"}, "tasks": {"arc_easy": {"metrics": {"acc": {"value": value, "stderr": stderr}},
                                                                  "n": 5, "baselines": None}}}


@pytest.mark.parametrize("result,message", [
    (_eval_result("1.5"), "arc_easy/acc (not a number) is '1.5'"),
    (_eval_result("0.5"), "arc_easy/acc (not a number) is '0.5'"),
    (_eval_result(True), "arc_easy/acc (not a number) is True"),
    (_eval_result(0.5, stderr="0.01"), "arc_easy/acc stderr (not a number) is '0.01'"),
    (_eval_result(1.5), "arc_easy/acc is 1.5"),
    ({"name": "m", "wikitext": {"perplexity": "22.1"}}, "'wikitext/perplexity' holds the number '22.1' as text"),
], ids=["acc text out of range", "acc text", "acc bool", "stderr text", "acc number out of range", "perplexity text"])
def test_compare_refuses_figures_that_are_not_numbers_as_it_refuses_impossible_ones(result, message, tmp_path, capsys):
    path = tmp_path / "result.json"
    path.write_text(json.dumps(result))
    err = one_line_error(["compare", str(path), "--output-dir", str(tmp_path / "report")], capsys)
    assert message in err, err
    assert not (tmp_path / "report").exists()


def test_compare_still_reads_sound_figures(tmp_path):
    path = tmp_path / "result.json"
    path.write_text(json.dumps(_eval_result(0.5)))
    assert main(["compare", str(path), "--output-dir", str(tmp_path / "report")]) == 0


# ---------------------------------------------------------------------------------------------- ICL sigmas


@pytest.mark.parametrize("args", [["--sigmas", "inf"], ["--sigmas", "1", "1e39"], ["--eval.length_sweep_sigma", "inf"],
                                  ["--eval.linear_sigmas_x", "1e39"], ["--train.sigma", "inf"]],
                         ids=["sigma inf", "sigma 1e39", "length sweep sigma inf", "linear sigma 1e39", "train sigma inf"])
def test_icl_refuses_sigmas_float32_cannot_hold(args, tmp_path, capsys):
    err = one_line_error(["icl", "--output-dir", str(tmp_path / "icl"), "--steps", "1", "--seeds", "0", "--no-progress",
                          "--device", "cpu", *args], capsys)
    assert re.search(r"sigma\S* must be .*> 0, got .*: each finite and at most 3\.403e\+38 \(float32's largest\)", err), err
    assert not (tmp_path / "icl").exists() or not any((tmp_path / "icl").rglob("checkpoint"))


def test_icl_accepts_float32s_largest_sigma():
    from ssa_hf.icl.config import FLOAT32_MAX, check_sigma

    check_sigma("eval.sigmas", float(torch.finfo(torch.float32).max))
    assert FLOAT32_MAX == float(torch.finfo(torch.float32).max)
    assert torch.isinf(torch.tensor(1e39, dtype=torch.float32))  # why 1e39 is refused


# ---------------------------------------------------------------------------------------------- corpus cache


def test_a_same_size_edit_with_the_old_mtime_is_read_anew(tmp_path):
    """`cp -p` of an edited copy (or clock skew) keeps size and mtime: the cache key holds the content's hash."""
    from ssa_hf.data.sources import TextSource, load_texts

    path = tmp_path / "corpus.txt"
    path.write_text("the old text one\nthe old text two\n")
    stat = path.stat()
    assert [r["text"] for r in load_texts(TextSource(path=str(path)))] == ["the old text one", "the old text two"]
    path.write_text("the new text one\nthe new text two\n")  # same size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns
    assert [r["text"] for r in load_texts(TextSource(path=str(path)))] == ["the new text one", "the new text two"]


# --------------------------------------------------------------------------------------------- Zorro and ARC


def test_a_zorro_file_with_a_byte_order_mark_reads_the_same_pairs(tmp_path):
    from ssa_hf.evaluation.zorro import load_paradigm

    folder = eval_fixtures.write_zorro(tmp_path / "zorro") / "sentences"
    path = folder / f"{eval_fixtures.ZORRO_PARADIGMS[0]}.txt"
    pairs = load_paradigm(path)
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert load_paradigm(path) == pairs


def test_an_arc_record_with_a_label_twice_is_refused_naming_it(tmp_path):
    from ssa_hf.evaluation.lm_tasks import write_local_tasks

    root = eval_fixtures.write_data(tmp_path / "data")
    path = root / "arc" / "ARC-Easy-test.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[1]["choices"] = {"text": ["light", "rocks", "sand", "air"], "label": ["A", "A", "B", "C"]}
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ValueError, match=re.escape(f"{path}, line 2: ") + r".*choices\.label \['A', 'A', 'B', 'C'\] "
                                                                         r"names 'A' twice"):
        write_local_tasks(root, tmp_path / "tasks", ["arc_easy"])


# --------------------------------------------------------------------------------------- Trainer weight decay


def test_trainer_gets_the_no_decay_rule_of_our_loop_in_one_line(tmp_path):
    from transformers import Trainer, TrainingArguments

    from ssa_hf.train.setup import parameter_groups

    tok = eval_fixtures.tokenizer(masked=False)
    model = eval_fixtures.causal_lm(tok, scoring="ssa")
    scoring = [n for n, p in model.named_parameters() if ".scoring." in f".{n}" and p.requires_grad]
    assert scoring, "the fixture's SSA model has learnable scoring parameters"
    args = TrainingArguments(output_dir=str(tmp_path / "trainer"), weight_decay=0.1, report_to=[], use_cpu=True)
    trainer = Trainer(model=model, args=args)
    assert set(scoring) <= set(trainer.get_decay_parameter_names(model))  # the stock rule decays b and n

    trainer.get_decay_parameter_names = model.decay_parameter_names  # the recipe (docs/pretraining.md)
    optimizer = trainer.create_optimizer()
    decayed = {id(p) for group in optimizer.param_groups if group["weight_decay"] > 0 for p in group["params"]}
    ours = parameter_groups(model, 0.1)
    assert decayed == {id(p) for p in ours[0]["params"]} and ours[0]["weight_decay"] == 0.1
    names = {id(p): n for n, p in model.named_parameters()}
    assert not any(names[i] in scoring for i in decayed)
    assert all(p.dim() >= 2 for group in optimizer.param_groups if group["weight_decay"] > 0 for p in group["params"])
    shutil.rmtree(tmp_path / "trainer", ignore_errors=True)
