"""The wiring from runs to verdicts (ssa_hf.reproduce.claims): the declared test's p decides, never the paired
t-test's or a p of 0; the interval's side gives the direction; both arms are read against the full split's
trivial baseline; an interval inside the declared margin excludes a paper-sized effect; the paper's own lm-eval
figures are measurable. Made-up per-seed figures, no training (fast)."""

from __future__ import annotations

import pytest

from ssa_hf.icl.stats import paired_differences, paired_t_test, wilcoxon_signed_rank
from ssa_hf.reproduce import EXCLUDED, INCONCLUSIVE, NOT_MEASURABLE, NOT_REPRODUCED, REPRODUCED, config_from_dict
from ssa_hf.reproduce.claims import apply_multiplicity, lm_claims, paper_primary, results_summary

# the four tasks' chance and majority on their whole evaluation split (ssa_hf.evaluation.harness.task_baselines
# on ../shared/data): the best trivial answer averages 0.3527
FULL_SPLIT = {"arc_easy": (0.25016, 0.26641), "arc_challenge": (0.25016, 0.26536), "boolq": (0.5, 0.62171),
              "hellaswag": (0.25, 0.25732)}
TASK_METRIC = {"arc_easy": "acc_norm", "arc_challenge": "acc_norm", "boolq": "acc", "hellaswag": "acc_norm"}


def _config(test: str = "wilcoxon", margin: float | None = None, seeds: int = 8):
    return config_from_dict({
        "scale": "tiny", "causal": {
            "pretrain": "unused.yaml", "arms": {"softmax": {}, "ssa": {}},
            "seeds": {"confirmatory": list(range(seeds))},
            "overrides": {"tokenizer": {"vocab_size": 1000}},
            # no limit: the scored documents are the whole split (nothing read from disk)
            "evaluation": {"lm_eval": {"tasks": list(FULL_SPLIT)}},
            "claims": {"perplexity": {"primary": {"metric": "nll_in", "direction": "lower", "test": test},
                                      **({"margin": margin} if margin else {})},
                       "lm_eval": {"primary": {"metric": "lm_eval_mean", "direction": "higher", "test": test},
                                   **({"margin": margin} if margin else {})}}}})


def _results(nll: dict[str, list[float]], accuracy: dict[str, list[float]]) -> list[dict]:
    """One result per (arm, seed): its NLL and every task at the given mean accuracy."""
    out = []
    for arm in ("softmax", "ssa"):
        for seed, (loss, acc) in enumerate(zip(nll[arm], accuracy[arm])):
            tasks = {t: {"metrics": {TASK_METRIC[t]: acc}, "baselines": {"chance": c, "majority": m, "n": 100}}
                     for t, (c, m) in FULL_SPLIT.items()}
            out.append({"kind": "causal", "arm": arm, "seed": seed,
                        "evaluations": {"perplexity": {"nll_in": loss, "nll_out": loss}, "lm_eval": {"tasks": tasks}}})
    return out


def _claims(config, results):
    claims = {c["id"]: c for c in lm_claims("causal", config.causal, results, config)}
    apply_multiplicity(list(claims.values()), config)
    return claims


# four seeds, SSA lower in every one: the paired t-test rejects (p ~ 1e-4) and the t interval lies below 0, but
# the exact Wilcoxon test cannot go below 2 / 2^4 = 0.125
FOUR = {"softmax": [5.0, 5.1, 5.2, 5.3], "ssa": [4.90, 5.01, 5.09, 5.21]}
ACC4 = {"softmax": [0.4] * 4, "ssa": [0.41, 0.4, 0.42, 0.4]}


def test_the_declared_wilcoxon_p_decides_not_the_t_test_nor_zero():
    config = _config("wilcoxon", seeds=4)
    row = _claims(config, _results(FOUR, ACC4))["causal_perplexity"]["rows"][0]
    differences = paired_differences(FOUR["ssa"], FOUR["softmax"])
    assert row["p"] == pytest.approx(wilcoxon_signed_rank(differences)["p"]) == pytest.approx(0.125)
    assert paired_t_test(differences) < 0.01 and row["comparison"]["high"] < 0  # t test and interval alone would say yes
    # wired to the t-test's p, or to p = 0 (the interval alone deciding), this would read reproduced
    assert row["verdict"] == INCONCLUSIVE


def test_the_declared_t_test_p_decides_when_declared():
    config = _config("t", seeds=4)
    row = _claims(config, _results(FOUR, ACC4))["causal_perplexity"]["rows"][0]
    assert row["p"] == pytest.approx(paired_t_test(paired_differences(FOUR["ssa"], FOUR["softmax"])))
    assert row["verdict"] == REPRODUCED == "reproduced at this scale"


EIGHT_BETTER = [5.0, 5.1, 5.2, 5.3, 5.4, 5.5, 5.6, 5.7]


def test_the_interval_side_gives_the_direction():
    config = _config("wilcoxon")
    lower = [v - 0.1 - 0.01 * (k % 3) for k, v in enumerate(EIGHT_BETTER)]
    higher = [v + 0.1 + 0.01 * (k % 3) for k, v in enumerate(EIGHT_BETTER)]
    acc = {"softmax": [0.5] * 8, "ssa": [0.5] * 8}
    better = _claims(config, _results({"softmax": EIGHT_BETTER, "ssa": lower}, acc))
    worse = _claims(config, _results({"softmax": EIGHT_BETTER, "ssa": higher}, acc))
    assert better["causal_perplexity"]["rows"][0]["verdict"] == REPRODUCED  # NLL is better lower
    assert worse["causal_perplexity"]["rows"][0]["verdict"] == NOT_REPRODUCED == "not reproduced at this scale"
    # accuracies are better higher: SSA's higher accuracy reproduces, its lower accuracy does not
    up = {"softmax": [0.50 + 0.01 * k for k in range(8)], "ssa": [0.56 + 0.011 * k for k in range(8)]}
    down = {"softmax": up["ssa"], "ssa": up["softmax"]}
    assert _claims(config, _results({"softmax": EIGHT_BETTER, "ssa": EIGHT_BETTER}, up))["causal_lm_eval"]["rows"][0]["verdict"] == REPRODUCED
    assert _claims(config, _results({"softmax": EIGHT_BETTER, "ssa": EIGHT_BETTER}, down))["causal_lm_eval"]["rows"][0]["verdict"] == NOT_REPRODUCED


def _noisy(mean: float, seeds: int = 8, step: float = 0.002) -> list[float]:
    return [mean + step * ((k % 4) - 1.5) for k in range(seeds)]


def test_both_arms_at_chance_is_not_measurable_and_a_treatment_leaving_it_is():
    config = _config("wilcoxon")
    nll = {"softmax": EIGHT_BETTER, "ssa": EIGHT_BETTER}
    at_chance = _claims(config, _results(nll, {"softmax": _noisy(0.291), "ssa": _noisy(0.289)}))["causal_lm_eval"]
    row = at_chance["rows"][0]
    assert row["measure_baseline"] == pytest.approx(0.35271, abs=1e-4)  # the full split's, not the scored subset's
    assert (row["control_beats"], row["treatment_beats"]) == (False, False) and row["verdict"] == NOT_MEASURABLE
    leaves = _claims(config, _results(nll, {"softmax": _noisy(0.291), "ssa": _noisy(0.40, step=0.003)}))["causal_lm_eval"]
    row = leaves["rows"][0]
    assert (row["control_beats"], row["treatment_beats"]) == (False, True)
    assert row["measurable"] is True and row["verdict"] == REPRODUCED


def test_the_papers_own_lm_eval_figures_are_measurable():
    # the paper's 114M decoder on the four tasks run: softmax 0.292 (at the trivial baseline) and SSA 0.425
    paper = paper_primary("lm_eval", "lm_eval_mean", list(FULL_SPLIT))
    assert paper["control"] == pytest.approx(0.2916, abs=1e-4) and paper["treatment"] == pytest.approx(0.4250, abs=1e-4)
    config = _config("wilcoxon")
    acc = {"softmax": _noisy(paper["control"]), "ssa": _noisy(paper["treatment"], step=0.003)}
    row = _claims(config, _results({"softmax": EIGHT_BETTER, "ssa": EIGHT_BETTER}, acc))["causal_lm_eval"]["rows"][0]
    assert row["control_beats"] is False  # the paper's control sat at chance too
    assert row["verdict"] != NOT_MEASURABLE and row["verdict"] == REPRODUCED


def test_an_interval_inside_the_margin_excludes_a_paper_sized_effect():
    nll = {"softmax": EIGHT_BETTER, "ssa": [v + 0.002 * ((k % 3) - 1) for k, v in enumerate(EIGHT_BETTER)]}
    acc = {"softmax": [0.5] * 8, "ssa": [0.5] * 8}
    excluded = _claims(_config("wilcoxon", margin=0.05), _results(nll, acc))["causal_perplexity"]
    assert excluded["rows"][0]["inside_margin"] is True
    assert excluded["rows"][0]["verdict"] == EXCLUDED == "paper-sized effect excluded at this scale"
    # the same figures with no declared margin (or one the interval crosses) stay inconclusive
    assert _claims(_config("wilcoxon"), _results(nll, acc))["causal_perplexity"]["rows"][0]["verdict"] == INCONCLUSIVE
    assert _claims(_config("wilcoxon", margin=0.001), _results(nll, acc))["causal_perplexity"]["rows"][0]["verdict"] == INCONCLUSIVE


def test_the_summary_carries_the_deciding_figures_and_holm():
    config = _config("wilcoxon")
    lower = [v - 0.1 - 0.01 * (k % 3) for k, v in enumerate(EIGHT_BETTER)]
    claims = _claims(config, _results({"softmax": EIGHT_BETTER, "ssa": lower}, {"softmax": [0.5] * 8, "ssa": [0.5] * 8}))
    figures = results_summary(list(claims.values()))["causal_perplexity"]
    row = claims["causal_perplexity"]["rows"][0]
    assert figures["p"] == row["p"] == pytest.approx(2 / 2**8) and figures["test"] == "wilcoxon"
    assert figures["verdict"] == REPRODUCED and figures["treatment_values"] == lower
    # two primaries with a p: Holm doubles the smaller (the lm-eval row has identical arms, p = 1)
    assert figures["holm_p"] == pytest.approx(2 * figures["p"]) and figures["survives"] is True
    assert figures["t_p"] == pytest.approx(paired_t_test(paired_differences(lower, EIGHT_BETTER)))


def test_a_limit_reads_the_full_split_baselines(monkeypatch):
    # with a `limit`, the scored documents' label majority is not the task's (ARC-Easy: 0.333 on its first 150
    # documents, 0.266 on the split): the baseline comes from the whole split
    from ssa_hf.evaluation import harness
    from ssa_hf.reproduce import claims

    calls = []

    def split(tasks, data_dir):
        calls.append((tuple(tasks), data_dir))
        return {t: {"chance": 0.25, "majority": 0.26641, "n": 2376} for t in tasks}

    monkeypatch.setattr(harness, "task_baselines", split)
    monkeypatch.setattr(claims, "_FULL_SPLIT", {})
    scored = {"arc_easy": {"chance": 0.2506, "majority": 0.3333, "n": 150}}
    limited = claims.full_split_baselines(["arc_easy"], {"limit": 150, "data_dir": "/data"}, scored)
    assert limited["arc_easy"]["majority"] == 0.26641 and calls == [(("arc_easy",), "/data")]
    # no limit: the scored documents are the split, nothing is read
    assert claims.full_split_baselines(["arc_easy"], {}, scored) == scored and len(calls) == 1


def test_the_docs_blocks_are_rewritten_from_the_summary(tmp_path):
    import json

    from ssa_hf.reproduce.__main__ import main

    figures = {"scale": "cpu", "claims": {"causal_perplexity": {
        "verdict": NOT_REPRODUCED, "mean_difference": 0.0197, "low": 0.0154, "high": 0.0239, "p": 0.03125,
        "test": "wilcoxon", "seeds": 6, "lower": 0, "higher": 6, "holm_p": 0.1875, "survives": False,
        "smallest_p": 0.03125, "alpha": 0.05, "size": None}}}
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps(figures))
    doc = tmp_path / "README.md"
    doc.write_text("intro\n<!-- generated: claims -->\nstale sentence\n<!-- end: claims -->\nafter\n")
    assert main(["--summary", str(summary), "--check", str(doc)]) == 1
    assert main(["--summary", str(summary), str(doc)]) == 0
    text = doc.read_text()
    assert "stale sentence" not in text and text.startswith("intro\n") and text.endswith("after\n")
    assert "| `causal_perplexity` | **not reproduced at this scale** | +0.0197 | [+0.0154, +0.0239] | 6 |" in text
    assert "0 of the 1 verdicts that a test decided survive" in text and "`causal_perplexity` (Holm p 0.188)" in text
    assert main(["--summary", str(summary), "--check", str(doc)]) == 0


def test_declared_margins_and_sizes_match_the_paper_and_the_config():
    from pathlib import Path

    from ssa_hf.options import ConfigError
    from ssa_hf.reproduce import load_config

    repo = Path(__file__).resolve().parents[2]
    for scale in ("cpu", "paper"):
        config = load_config(repo / "configs" / "experiments" / f"reproduce_{scale}.yaml")
        causal, masked = config.causal, config.masked
        # each margin is half the paper's effect on the primary (lm-eval: the four tasks with offline data)
        assert causal.claims["perplexity"].margin == pytest.approx(
            abs(paper_primary("perplexity", "nll_in")["difference"]) / 2, abs=1e-3)
        assert causal.claims["lm_eval"].margin == pytest.approx(
            paper_primary("lm_eval", "lm_eval_mean", list(FULL_SPLIT))["difference"] / 2, abs=1e-3)
        assert masked.claims["zorro"].margin == pytest.approx(paper_primary("zorro", "zorro_mean")["difference"] / 2, abs=1e-2)
    cpu = load_config(repo / "configs" / "experiments" / "reproduce_cpu.yaml").causal
    size = cpu.claims["lm_eval"].size
    assert size.tokens == cpu.overrides["max_steps"] * cpu.overrides["per_device_train_batch_size"] * 128
    assert size.paper_tokens == pytest.approx(22_000 * 768 * 1024, rel=0.01)  # the paper's 114M run
    with pytest.raises(ConfigError, match="margin"):
        _config_with(margin=0.0)
    with pytest.raises(ConfigError, match="size"):
        _config_with(size={"parameters": 1, "tokens": 0, "paper_parameters": 1, "paper_tokens": 1})


def _config_with(**claim):
    return config_from_dict({"scale": "tiny", "causal": {
        "pretrain": "unused.yaml", "arms": {"softmax": {}, "ssa": {}}, "seeds": {"confirmatory": [0, 1]},
        "claims": {"perplexity": {"primary": {"metric": "nll_in"}, **claim},
                   "lm_eval": {"primary": {"metric": "lm_eval_mean", "direction": "higher"}}}}})
