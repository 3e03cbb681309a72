"""`run_eval`: lm-eval on a tiny ssa-hf checkpoint and the made-up local data; the same numbers as the stock
`lm_eval --model hf ... trust_remote_code=True` route; what the results record; clear errors."""

from __future__ import annotations

import hashlib
import json

import pytest

from ssa_hf.evaluation.harness import EvalConfig, baselines, parse_metrics, run_eval, task_baselines
from ssa_hf.evaluation.lm_tasks import LOCAL_TASKS, stock_version

from .conftest import STOCK_TASKS, LmEvalCommand
from .fixtures import EXPECTED

TASKS = STOCK_TASKS
BATCH = 4


@pytest.fixture(scope="module")
def ssa_run(ssa_causal_dir, data_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("eval")
    config = EvalConfig(model=str(ssa_causal_dir), tasks=TASKS, data_dir=str(data_dir), batch_size=BATCH,
                        device="cpu", output_dir=str(out), log_samples=True)
    return run_eval(config), out


# -------------------------------------------------------------------------------------------- unit parts


def test_parse_metrics_pairs_values_with_stderr():
    parsed = parse_metrics({"alias": "x", "acc,none": 0.5, "acc_stderr,none": 0.1, "acc_norm,none": 0.25,
                            "acc_norm_stderr,none": "N/A", "exact_match,strict-match": 1.0})
    assert parsed == {
        "acc": {"value": 0.5, "stderr": 0.1},
        "acc_norm": {"value": 0.25, "stderr": None},
        "exact_match,strict-match": {"value": 1.0, "stderr": None},
    }


def test_baselines_chance_and_majority():
    samples = [
        {"target": 1, "arguments": [["q", " no"], ["q", " yes"]]},
        {"target": 1, "arguments": [["q", " no"], ["q", " yes"]]},
        {"target": 0, "arguments": [["q", " no"], ["q", " yes"]]},
    ]
    base = baselines(samples)
    assert base["chance"] == pytest.approx(0.5)
    assert base["majority"] == pytest.approx(2 / 3) and base["majority_answer"] == "yes"
    mixed = [{"target": 2, "arguments": [["q", f" {i}"] for i in range(4)]},
             {"target": 0, "arguments": [["q", f" {i}"] for i in range(3)]}]
    base = baselines(mixed)
    assert base["chance"] == pytest.approx((1 / 4 + 1 / 3) / 2) and base["num_choices"] == [3, 4]
    assert baselines([{"target": "text", "arguments": [["q", "a"]]}]) is None  # not multiple choice


# --------------------------------------------------------------------------------------------- the run


def test_results_record_what_a_score_needs(ssa_run, ssa_causal_dir):
    results, out = ssa_run
    data = json.loads((out / "eval.json").read_text())
    assert data["kind"] == "lm_eval" and data["name"] == "tiny-ssa"
    assert data["settings"]["num_fewshot"] == 0 and data["settings"]["data"] == "local"
    import lm_eval

    assert data["versions"]["lm_eval"] == lm_eval.__version__
    weights = ssa_causal_dir / "model.safetensors"
    file_hash = hashlib.sha256(weights.read_bytes()).hexdigest()
    assert data["model"]["checkpoint_hash"]["files"] == {"model.safetensors": file_hash}
    assert data["model"]["config"]["attention_scoring"] == "ssa"
    assert data["model"]["model_class"] == "SSALlamaForCausalLM"
    assert set(data["model"]["scoring_parameters"]) == {f"model.layers.{i}.self_attn.scoring" for i in range(2)}
    assert data["settings"]["attn_implementation"] == "ssa_auto"
    for name in TASKS:
        task = data["tasks"][name]
        assert task["version"] == stock_version(LOCAL_TASKS[name])
        assert task["num_fewshot"] == 0
        assert task["n"] == task["n_total"] == len(EXPECTED[name]["gold"])
        assert task["data"]["dataset_path"] == "json"
        assert 0.0 <= task["metrics"]["acc"]["value"] <= 1.0 and task["metrics"]["acc"]["stderr"] is not None
    assert "acc_norm" in data["tasks"]["arc_easy"]["metrics"] and "acc_norm" not in data["tasks"]["boolq"]["metrics"]
    for name in ("eval.md", "eval.png", "eval_samples.json", "lm_eval_tasks/arc_easy.yaml"):
        assert (out / name).is_file(), name


@pytest.mark.parametrize("name", TASKS)
def test_baselines_come_from_the_scored_labels(ssa_run, name):
    results, _ = ssa_run
    base = results.tasks[name]["baselines"]
    gold, choices = EXPECTED[name]["gold"], EXPECTED[name]["num_choices"]
    assert base["n"] == len(gold)
    assert base["chance"] == pytest.approx(sum(1 / k for k in choices) / len(choices))
    assert base["majority"] == pytest.approx(max(gold.count(g) for g in set(gold)) / len(gold))


def test_baselines_without_a_model(data_dir, tmp_path):
    result = task_baselines(["boolq", "arc_challenge"], str(data_dir), output_dir=str(tmp_path))
    assert result["boolq"]["majority"] == pytest.approx(4 / 6) and result["boolq"]["majority_answer"] == "yes"
    assert result["arc_challenge"]["chance"] == pytest.approx((1 / 4 + 1 / 4 + 1 / 5) / 3)
    assert result["arc_challenge"]["n"] == result["arc_challenge"]["n_total"] == 3
    assert task_baselines(["boolq"], str(data_dir), limit=2)["boolq"]["majority"] == pytest.approx(0.5)
    assert "| boolq | 6 | 2 | 0.5000 | 0.6667 | yes |" in (tmp_path / "baselines.md").read_text()


def test_accuracy_matches_the_logged_loglikelihoods(ssa_run):
    """acc recomputed from the per-choice log-likelihoods lm-eval logged (argmax vs gold)."""
    results, out = ssa_run
    samples = json.loads((out / "eval_samples.json").read_text())
    for name in TASKS:
        hits = [float(max(range(len(s["filtered_resps"])), key=lambda i: s["filtered_resps"][i][0]) == s["target"])
                for s in samples[name]]
        assert results.metric(name, "acc") == pytest.approx(sum(hits) / len(hits))


def test_markdown_shows_value_stderr_and_baselines(ssa_run):
    _, out = ssa_run
    text = (out / "eval.md").read_text()
    assert "| task | metric | tiny-ssa | chance | majority | n | shots |" in text
    assert "| boolq | acc |" in text and "(yes)" in text
    assert "num_fewshot = 0" in text and "±" in text


def _assert_same_numbers(results, ours_samples, their_results, their_samples) -> None:
    for name in TASKS:
        theirs = parse_metrics(their_results[name])
        for metric, entry in results.tasks[name]["metrics"].items():
            assert theirs[metric]["value"] == entry["value"], (name, metric)
            assert theirs[metric]["stderr"] == pytest.approx(entry["stderr"]), (name, metric)
        # per-choice log-likelihoods agree too (a sharper check than accuracy on a few documents)
        ours_ll = {s["doc_id"]: [float(r[0]) for r in s["filtered_resps"]] for s in ours_samples[name]}
        assert len(their_samples[name]) == len(ours_ll)
        for sample in their_samples[name]:
            their_ll = [float(r[0]) for r in sample["filtered_resps"]]
            assert their_ll == pytest.approx(ours_ll[sample["doc_id"]], abs=1e-4), name


def test_ssa_hf_model_name_through_lm_eval(ssa_run, ssa_causal_dir):
    """lm-eval resolving the name `ssa-hf` itself (model given as a string, as its CLI does): the same numbers."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    results, out = ssa_run
    raw = lm_eval.simple_evaluate(model="ssa-hf", model_args=f"pretrained={ssa_causal_dir}", tasks=TASKS,
                                  num_fewshot=0, batch_size=BATCH, log_samples=True,
                                  task_manager=TaskManager(include_path=str(out / "lm_eval_tasks"), include_defaults=False))
    assert raw["config"]["model"] == "ssa-hf" and raw["config"]["attention_scoring"] == "ssa"
    assert raw["config"]["scoring_parameters"] == results.model["scoring_parameters"]
    _assert_same_numbers(results, json.loads((out / "eval_samples.json").read_text()), raw["results"], raw["samples"])


def test_same_numbers_as_the_stock_lm_eval_command(ssa_run, stock_lm_eval):
    """The literal `lm_eval --model hf --model_args pretrained=DIR,trust_remote_code=True` in a fresh process
    (started in the background by the `stock_lm_eval` fixture; ssa-hf is never imported there, the checkpoint's
    remote code runs), on the same local tasks; and `ssa-hf compare` reading its results file."""
    results, out = ssa_run
    raw, samples = stock_lm_eval.wait()
    assert raw["config"]["model"] == "hf"
    _assert_same_numbers(results, json.loads((out / "eval_samples.json").read_text()), raw["results"], samples)
    from ssa_hf.evaluation.compare import load_results

    loaded = load_results([str(stock_lm_eval.results_file())])["lm_eval"][0]
    assert loaded["tasks"]["boolq"]["metrics"]["acc"]["value"] == results.metric("boolq")
    assert loaded["name"] == "tiny-ssa"


@pytest.mark.slow
def test_ssa_hf_model_name_on_lm_eval_command_line(ssa_run, ssa_causal_dir, tmp_path):
    """`python -m ssa_hf.evaluation.lm_eval_cli --model ssa-hf ...` (lm-eval's CLI with the name registered), in a
    fresh process."""
    results, out = ssa_run
    run = LmEvalCommand("ssa_hf.evaluation.lm_eval_cli", "ssa-hf", f"pretrained={ssa_causal_dir}",
                        out / "lm_eval_tasks", tmp_path / "ssa", TASKS, BATCH)
    raw, samples = run.wait()
    assert raw["config"]["model"] == "ssa-hf" and raw["config"]["attention_scoring"] == "ssa"
    _assert_same_numbers(results, json.loads((out / "eval_samples.json").read_text()), raw["results"], samples)


def test_lm_eval_command_line_without_device_runs_on_this_machine(ssa_run, ssa_causal_dir, tmp_path, monkeypatch):
    """`ssa-hf-lm-eval --model ssa-hf ...` without --device (lm-eval's own default is cuda:0, a traceback on a CPU
    machine): the wrapper resolves the device, and the run writes its results."""
    from ssa_hf.evaluation.lm_eval_cli import main

    _, out = ssa_run
    monkeypatch.chdir(tmp_path)
    main(["run", "--model", "ssa-hf", "--model_args", f"pretrained={ssa_causal_dir}", "--tasks", "arc_easy",
          "--include_path", str(out / "lm_eval_tasks"), "--limit", "2", "--output_path", str(tmp_path / "results")])
    (results,) = (tmp_path / "results").rglob("results_*.json")
    assert "arc_easy" in json.loads(results.read_text())["results"]


def test_the_wrapper_adds_a_device_only_to_runs_that_name_none():
    from ssa_hf.evaluation.lm_eval_cli import with_default_device

    assert with_default_device(["run", "--model", "ssa-hf"])[-2:] == ["--device", "cpu"]  # (the tests run on CPU)
    assert with_default_device(["--model", "ssa-hf", "--device", "cuda:1"]) == ["--model", "ssa-hf", "--device", "cuda:1"]
    assert with_default_device(["--model", "ssa-hf", "--device=mps"]) == ["--model", "ssa-hf", "--device=mps"]
    assert with_default_device(["ls", "tasks"]) == ["ls", "tasks"]


def direct_loglikelihood(model_dir, context: str, continuation: str) -> float:
    """log p(continuation | context) by a plain forward pass, tokenised as lm-eval's HFLM does (no BOS; the
    continuation's tokens are those of the whole string after the context's)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    context_ids = tok(context, add_special_tokens=False)["input_ids"]
    whole = tok(context + continuation, add_special_tokens=False)["input_ids"]
    continuation_ids = whole[len(context_ids):]
    with torch.no_grad():
        logprobs = model(torch.tensor([whole])).logits.log_softmax(-1)[0]
    return float(sum(logprobs[len(context_ids) - 1 + i, t] for i, t in enumerate(continuation_ids)))


def test_loglikelihoods_match_a_direct_forward_and_differ_from_the_softmax_twin(ssa_run, ssa_causal_dir,
                                                                                 softmax_causal_dir, data_dir, tmp_path):
    _, out = ssa_run
    first = json.loads((out / "eval_samples.json").read_text())["arc_easy"][0]
    context, continuation = first["arguments"][0]
    assert first["filtered_resps"][0][0] == pytest.approx(direct_loglikelihood(ssa_causal_dir, context, continuation), abs=1e-4)
    # the softmax twin (same weights, attention_scoring="softmax") gives other numbers: SSA really runs
    twin = run_eval(EvalConfig(model=str(softmax_causal_dir), tasks=["arc_easy"], data_dir=str(data_dir),
                               batch_size=BATCH, device="cpu", output_dir=str(tmp_path), log_samples=True))
    assert twin.model["attention_scoring"] == "softmax"
    twin_first = json.loads((tmp_path / "eval_samples.json").read_text())["arc_easy"][0]
    assert twin_first["filtered_resps"][0][0] == pytest.approx(direct_loglikelihood(softmax_causal_dir, context, continuation), abs=1e-4)
    assert abs(twin_first["filtered_resps"][0][0] - first["filtered_resps"][0][0]) > 1e-3


def test_ssa_hf_name_is_registered_with_lm_eval():
    import ssa_hf.evaluation  # noqa: F401
    from lm_eval.api.registry import get_model

    from ssa_hf.evaluation.lm_eval_model import SSAHFLM

    assert get_model("ssa-hf") is SSAHFLM
    assert get_model("hf").__name__ == "HFLM"  # registering ours leaves lm-eval's own models in place


# ------------------------------------------------------------------------------------------------ errors


def test_masked_lm_is_refused_with_a_pointer_to_probe(masked_dir):
    from ssa_hf.evaluation.lm_eval_model import SSAHFLM

    with pytest.raises(ValueError, match="masked language model.*ssa-hf probe"):
        SSAHFLM(pretrained=str(masked_dir), device="cpu")


def test_model_that_cannot_be_loaded(tmp_path, data_dir):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        run_eval(EvalConfig(model=str(tmp_path / "missing"), tasks=["boolq"], data_dir=str(data_dir)))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no config.json"):
        run_eval(EvalConfig(model=str(tmp_path / "empty"), tasks=["boolq"], data_dir=str(data_dir)))


def test_checkpoint_without_tokenizer_cannot_be_loaded(ssa_causal_dir, tmp_path, data_dir):
    folder = tmp_path / "no-tokenizer"
    folder.mkdir()
    for file in ssa_causal_dir.iterdir():
        if not file.name.startswith("tokenizer"):
            (folder / file.name).write_bytes(file.read_bytes())
    with pytest.raises(FileNotFoundError, match="no tokenizer files"):
        run_eval(EvalConfig(model=str(folder), tasks=["boolq"], data_dir=str(data_dir), device="cpu"))
    (folder / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"config\.json: not valid JSON"):  # (named before transformers reads it)
        run_eval(EvalConfig(model=str(folder), tokenizer=str(ssa_causal_dir), tasks=["boolq"], data_dir=str(data_dir),
                            device="cpu"))


@pytest.mark.parametrize(
    "change, error",
    [
        ({"tasks": []}, "at least one task"),
        ({"num_fewshot": -1}, "num_fewshot"),
        ({"limit": 0}, "limit"),
        ({"limit": 2.5}, "fraction must be < 1"),
        ({"batch_size": 0}, "batch_size"),
    ],
)
def test_bad_settings_name_the_field(change, error):
    config = EvalConfig(model="some/model", **change)
    with pytest.raises(ValueError, match=error):
        config.validate()


def test_config_from_yaml_with_overrides(tmp_path):
    path = tmp_path / "eval.yaml"
    path.write_text("model: some/model\ntasks: [boolq]\nlimit: 10\nnum_fewshot: 0\n")
    config = EvalConfig.from_yaml(path, limit=5, device=None)
    assert config.tasks == ["boolq"] and config.limit == 5 and config.device is None
    path.write_text("model: m\ntask: boolq\n")
    with pytest.raises(ValueError, match=r"eval.yaml: unknown config key 'task'; did you mean 'tasks'\?"):
        EvalConfig.from_yaml(path)


@pytest.mark.parametrize("loader", ["lm-eval", "perplexity", "probe"])
def test_ssa_weights_under_a_stock_model_type_are_refused(loader, ssa_causal_dir, data_dir, tmp_path):
    """config.json saying model_type 'llama' beside SSA weights would load transformers' LlamaForCausalLM: softmax
    attention, the scoring tensors dropped as unexpected keys. Every evaluation loader refuses it."""
    import shutil

    from ssa_hf.evaluation.config import ProbeConfig
    from ssa_hf.evaluation.lm_eval_model import SSAHFLM
    from ssa_hf.evaluation.perplexity import evaluate_perplexity
    from ssa_hf.evaluation.zorro import load_probe_model

    folder = shutil.copytree(ssa_causal_dir, tmp_path / "relabelled")
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "ssa_llama"
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
    load = {
        "lm-eval": lambda: SSAHFLM(pretrained=str(folder), device="cpu"),
        "perplexity": lambda: evaluate_perplexity(str(folder), data=str(data_dir / "boolq"), device="cpu"),
        "probe": lambda: load_probe_model(ProbeConfig(model=str(folder), device="cpu"), str(folder)),
    }[loader]
    with pytest.raises(ValueError, match="holds? SSA scoring parameters.*model_type 'llama'.*softmax"):
        load()
