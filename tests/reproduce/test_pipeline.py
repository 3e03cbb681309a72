"""`ssa-hf reproduce` end to end at a tiny scale (made-up data, models of a few thousand parameters, a few steps):
every claim's row in RESULTS.md, resumption, --report-only, and a partial table when runs are missing."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from ssa_hf.reproduce import VERDICTS, config_from_dict, run_reproduce

from ..data.fixtures import documents, sentences, write_jsonl, write_text
from ..evaluation.fixtures import write_data, write_zorro

ARMS = {"softmax": {"model": {"attention_scoring": "softmax"}}, "ssa": {"model": {"attention_scoring": "ssa"}}}
COMMON = {"max_steps": 3, "learning_rate": 1e-2, "min_learning_rate": 1e-3, "warmup_steps": 1, "logging_steps": 1,
          "eval_steps": 0, "save_steps": 0, "per_device_eval_batch_size": 16, "report_to": ["none"], "cpu": True}


def _pretrain_files(root):
    masked = {"task": "masked", "model": {"preset": "tiny_bert"}, "tokenizer": {"vocab_size": 300, "train_documents": None},
              "data": {"train": {"path": str(write_text(root / "speech.train", sentences(400, seed=1)))},
                       "validation": {"path": str(write_text(root / "speech.dev", sentences(60, seed=2)))},
                       "validation_documents": 20, "max_length": 24},
              "per_device_train_batch_size": 16, **COMMON}
    causal = {"task": "causal", "model": {"preset": "tiny_llama"}, "tokenizer": {"vocab_size": 300, "train_documents": None},
              "data": {"train": {"path": str(write_jsonl(root / "web.jsonl.gz", documents(80, per_document=8), gz=True))},
                       "validation_documents": 20, "block_size": 32, "pack_documents": 40},
              "per_device_train_batch_size": 8, **COMMON}
    for name, values in (("masked", masked), ("causal", causal)):
        (root / f"{name}.yaml").write_text(yaml.safe_dump(values))
    return root / "masked.yaml", root / "causal.yaml"


def tiny_config(root) -> dict:
    data = write_data(root / "data")
    write_zorro(data / "zorro")
    write_text(data / "ood.txt", [" ".join(sentences(12, seed=k)) for k in range(20)])
    masked, causal = _pretrain_files(root)
    icl = {"preset": "quick", "tasks": ["every"], "attention_scoring": ["softmax", "ssa"],
           "model": {"layers": 1, "heads": 2, "width": 16, "max_points": 32},
           "train": {"steps": 2, "batch_size": 8, "warmup_steps": 0, "checkpoint_every": 1, "log_every": 1,
                     "curriculum": {"start": 5, "end": 7, "increment": 2, "interval": 1}},
           "eval": {"sigmas": [1, 8], "lengths": [6, 12], "batches": 1, "batch_size": 8, "probe": False},
           "stats": {"primary": {"task": "every", "min_value": 8}, "bootstrap_resamples": 200}}
    magnitude = {"metric": "sequence_error", "sweep": "sigma_sweep", "min_value": 8, "direction": "lower", "test": "wilcoxon"}
    return {
        "scale": "tiny", "description": "a test", "data_dir": str(data), "workers": 1, "threads": 1, "device": "cpu",
        "icl": {"every": {"config": icl, "seeds": {"confirmatory": [0, 1], "exploratory": [2, 3]},
                          "claims": {"magnitude": {"claim": "c", "primary": magnitude, "power": {"sd": 0.2, "effect": 0.1},
                                                   "secondary": [{"metric": "sequence_error", "sweep": "sigma_sweep",
                                                                  "test_set": "standard", "min_value": 8}]},
                                     "length": {"claim": "c", "primary": {**magnitude, "sweep": "length_sweep", "min_value": 12}}}}},
        "masked": {"pretrain": str(masked), "arms": ARMS, "seeds": {"confirmatory": [0, 1]},
                   "evaluation": {"zorro": {"zorro_dir": str(data / "zorro"), "methods": ["holistic"], "batch_size": 8}},
                   "claims": {"zorro": {"primary": {"metric": "zorro_mean", "direction": "higher"},
                                        "secondary": [{"metric": "zorro:binding-principle_a", "direction": "higher"}]}}},
        "causal": {"pretrain": str(causal), "arms": ARMS, "seeds": {"confirmatory": [0, 1]},
                   "evaluation": {"perplexity": {"windows": 4, "window_length": 16, "out_of_distribution": str(data / "ood.txt")},
                                  "lm_eval": {"tasks": ["arc_easy", "boolq"], "limit": 3, "batch_size": 4}},
                   "claims": {"perplexity": {"primary": {"metric": "nll_in", "direction": "lower"},
                                             "secondary": [{"metric": "nll_out", "direction": "lower"}]},
                              "lm_eval": {"primary": {"metric": "lm_eval_mean", "direction": "higher"},
                                          "secondary": [{"metric": "lm_eval:arc_easy", "direction": "higher"},
                                                        {"metric": "lm_eval:boolq", "direction": "higher"}]}}},
    }


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    root = tmp_path_factory.mktemp("reproduce")
    values = tiny_config(root)
    saved = os.environ.get("SSA_HF_DATA_DIR")
    summary = run_reproduce(config_from_dict(values), root / "out", command="test", results_file=root / "docs" / "RESULTS.md")
    # the run points $SSA_HF_DATA_DIR at its data only while it runs: later code (and tests) see the caller's value
    assert os.environ.get("SSA_HF_DATA_DIR") == saved
    return root, values, summary


CLAIMS = {"icl_every_magnitude", "icl_every_length", "masked_zorro", "causal_perplexity", "causal_lm_eval"}


def test_every_claim_has_its_rows_and_a_verdict(finished):
    root, _, summary = finished
    claims = {c["id"]: c for c in summary["claims"]}
    assert set(claims) == CLAIMS and not summary["pending"]
    for claim in claims.values():
        deciding = [r for r in claim["rows"] if r["decides"]]
        assert len(deciding) == 1 and deciding[0] is claim["rows"][0] and deciding[0]["verdict"] in VERDICTS
        # every other row is exploratory: a nominal p, never a verdict word
        for row in claim["rows"][1:]:
            assert row["verdict"] is None and row["reading"].startswith("exploratory")
        assert claim["rows"][0]["holm_p"] is not None
    magnitude = claims["icl_every_magnitude"]
    # the confirmatory seeds decide; the exploratory seeds get their own row, never pooled
    assert [(r["primary"], r["seeds_kind"], r["seed_list"]) for r in magnitude["rows"]] == [
        (True, "confirmatory", [0, 1]), (True, "exploratory", [2, 3]), (False, "confirmatory", [0, 1])]
    assert magnitude["rows"][0]["test"] == "wilcoxon" and "majority" in magnitude["rows"][0]["baselines"]
    assert magnitude["power"]["seeds"] == 2 and magnitude["power"]["seeds_for_80"] > 2
    assert "positions: rotary" in claims["icl_every_length"]["protocol"]
    assert [r["label"] for r in claims["masked_zorro"]["rows"]][1:] == ["binding-principle_a"]
    assert len(claims["masked_zorro"]["paradigms"]) == 23
    perplexity = claims["causal_perplexity"]["rows"]
    assert perplexity[0]["paper"]["softmax"] == 21.86 and perplexity[1]["paper"]["ssa"] == 22.07
    assert {r["label"] for r in claims["causal_lm_eval"]["rows"][1:]} == {"arc_easy", "boolq"}
    assert claims["causal_lm_eval"]["baselines"]["boolq"]["majority"] is not None
    assert "best trivial" in claims["causal_lm_eval"]["rows"][0]["baselines"]
    text = (root / "out" / "RESULTS.md").read_text()
    assert text == (root / "docs" / "RESULTS.md").read_text()
    figures = json.loads((root / "docs" / "results_summary.json").read_text())
    assert set(figures["claims"]) == CLAIMS
    for fragment in ("## Claims (primary endpoints, confirmatory seeds)", "- Command: `test`", "Machine:", "**primary:**",
                     "21.86 → 19.73", "0.2934 → 0.5387", "78.25 → 87.9", "Chance and majority", "winogrande",
                     "cb acc / f1", "exploratory, nominal p", "## Where SSA is worse", "Holm p", "Power:"):
        assert fragment in text, fragment
    assert "Not run" not in text


def test_a_second_call_reuses_every_run(finished):
    root, values, first = finished
    summary = run_reproduce(config_from_dict(values), root / "out", command="test")
    assert summary["reused"] == summary["runs"] == first["runs"] == 8 + 8
    assert summary["minutes"] < first["minutes"]
    verdicts = lambda s: [[(r["verdict"], r["reading"]) for r in c["rows"]] for c in s["claims"]]  # noqa: E731
    assert verdicts(summary) == verdicts(first)


def test_report_only_and_a_partial_table(finished):
    root, values, _ = finished
    out = root / "out"
    result = out / "causal" / "ssa-seed1" / "result.json"
    result.rename(result.with_suffix(".away"))  # one causal run "not finished"
    try:
        summary = run_reproduce(config_from_dict(values), out, command="test", report_only=True)
        assert not result.exists()  # report-only ran nothing
    finally:
        result.with_suffix(".away").rename(result)
    assert summary["pending"] == ["causal_perplexity", "causal_lm_eval"]
    assert {c["id"] for c in summary["claims"]} == CLAIMS - {"causal_perplexity", "causal_lm_eval"}
    text = (out / "RESULTS.md").read_text()
    assert "**Not run (or not finished) yet:** causal_perplexity, causal_lm_eval" in text
    # nothing ran: the way on is a run without --report-only, not "the same command runs them"
    assert "without --report-only" in text and "The same command runs them" not in text


def test_confirmatory_only_runs_no_exploratory_seed(tmp_path):
    values = tiny_config(tmp_path)
    values.pop("masked"), values.pop("causal")
    summary = run_reproduce(config_from_dict(values), tmp_path / "out", command="test", confirmatory_only=True)
    runs = sorted(p.name for p in (tmp_path / "out" / "icl" / "every" / "runs").iterdir())
    assert runs == ["every-softmax-seed0", "every-softmax-seed1", "every-ssa-seed0", "every-ssa-seed1"]
    magnitude = next(c for c in summary["claims"] if c["id"] == "icl_every_magnitude")
    assert all(r["seeds_kind"] == "confirmatory" for r in magnitude["rows"]) and not magnitude["exploratory_run"]
    assert "not run by this call" in (tmp_path / "out" / "RESULTS.md").read_text()


def test_a_folder_trained_with_other_settings_is_refused(finished):
    root, values, _ = finished
    changed = json.loads(json.dumps(values))
    changed["masked"]["arms"]["ssa"]["model"]["overrides"] = {"hidden_size": 16}
    with pytest.raises(ValueError, match="trained with other settings"):
        run_reproduce(config_from_dict(changed), root / "out", command="test")
