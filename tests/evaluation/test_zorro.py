"""Zorro probes: the three scoring methods against plain per-sentence references, the pair logic, the run's
outputs, a model trained on one side of the pairs, and the errors."""

from __future__ import annotations

import json

import pytest
import torch

from ssa_hf.evaluation.zorro import (
    ZORRO_PARADIGMS,
    ProbeConfig,
    load_paradigm,
    load_zorro,
    pair_accuracy,
    resolve_zorro_dir,
    run_probe,
    score_holistic,
    score_loglik,
    score_pll,
)

from . import fixtures

SENTENCES = [s for pair in fixtures.ZORRO_PAIRS for s in pair] + ["the big dog sees a cat on the mat and runs to the park ."]


@pytest.fixture(scope="module")
def mlm(masked_tokenizer):
    return fixtures.masked_lm(masked_tokenizer), masked_tokenizer


@pytest.fixture(scope="module")
def clm(causal_tokenizer):
    return fixtures.causal_lm(causal_tokenizer), causal_tokenizer


# ------------------------------------------------------------------------------------------ the scorers


@torch.no_grad()
def test_holistic_is_minus_mean_token_cross_entropy(mlm):
    model, tok = mlm
    expected = []
    for sentence in SENTENCES:
        ids = torch.tensor([tok(sentence)["input_ids"]])
        assert ids[0, 0] == tok.bos_token_id and ids[0, -1] == tok.eos_token_id  # special tokens are scored too
        logits = model(input_ids=ids).logits[0]
        expected.append(-float(torch.nn.functional.cross_entropy(logits, ids[0])))
    got = score_holistic(model, tok, SENTENCES, batch_size=3)  # padded batches of mixed lengths
    assert got == pytest.approx(expected, abs=1e-5)


@torch.no_grad()
def test_pll_masks_each_word_token_in_turn(mlm):
    model, tok = mlm
    expected = []
    for sentence in SENTENCES:
        ids = tok(sentence)["input_ids"]
        total = 0.0
        for position in range(1, len(ids) - 1):  # every token but <s> and </s>
            masked = list(ids)
            masked[position] = tok.mask_token_id
            logits = model(input_ids=torch.tensor([masked])).logits[0, position]
            total += float(logits.log_softmax(-1)[ids[position]])
        expected.append(total)
    got = score_pll(model, tok, SENTENCES, batch_size=5)
    assert got == pytest.approx(expected, abs=1e-4)


@torch.no_grad()
def test_loglik_is_the_sentence_log_likelihood_after_bos(clm):
    model, tok = clm
    expected = []
    for sentence in SENTENCES:
        ids = torch.tensor([[tok.bos_token_id] + tok(sentence, add_special_tokens=False)["input_ids"]])
        loss = model(input_ids=ids, labels=ids).loss  # transformers' own mean next-token loss
        expected.append(-float(loss) * (ids.shape[1] - 1))
    got = score_loglik(model, tok, SENTENCES, batch_size=3)
    assert got == pytest.approx(expected, abs=1e-4)


def test_pair_accuracy_ties_wrong_or_broken_at_random():
    bad, good = [1.0, 2.0, 3.0, 0.0], [2.0, 1.0, 3.0, 5.0]
    wrong = pair_accuracy(bad, good, ties="wrong")
    assert wrong == {"accuracy": 0.5, "correct": 2, "ties": 1, "ties_won": 0, "accuracy_ties_wrong": 0.5, "tie_rule": "wrong", "n": 4}
    # 1,000 tied pairs: a fair coin per tie, reproducible for a seed, different across seeds
    tied = pair_accuracy([0.0] * 1000, [0.0] * 1000, seed=1)
    assert tied["ties"] == 1000 and tied["correct"] == 0 and tied["accuracy_ties_wrong"] == 0.0
    assert 0.45 < tied["accuracy"] < 0.55 and tied["accuracy"] == tied["ties_won"] / 1000
    assert tied == pair_accuracy([0.0] * 1000, [0.0] * 1000, seed=1)
    assert tied["ties_won"] != pair_accuracy([0.0] * 1000, [0.0] * 1000, seed=2)["ties_won"]
    # untied pairs are never changed by the tie rule
    assert pair_accuracy(bad, good, seed=5)["accuracy"] in (0.5, 0.75)
    with pytest.raises(ValueError, match="ties must be"):
        pair_accuracy(bad, good, ties="half")


# -------------------------------------------------------------------------------------------------- data


def test_paradigm_files_are_bad_good_pairs(tmp_path):
    path = tmp_path / "p.txt"
    path.write_text("bad one .\ngood one .\nbad two .\ngood two .\n\n")
    assert load_paradigm(path) == [("bad one .", "good one ."), ("bad two .", "good two .")]
    assert load_paradigm(path, limit=1) == [("bad one .", "good one .")]
    path.write_text("bad one .\ngood one .\nbad two .\n")
    with pytest.raises(ValueError, match="even number of lines"):
        load_paradigm(path)


def test_zorro_folder_resolution_and_missing_paradigms(zorro_root, tmp_path):
    assert resolve_zorro_dir(zorro_root) == (zorro_root / "sentences").resolve()
    assert resolve_zorro_dir(zorro_root / "sentences") == (zorro_root / "sentences").resolve()
    with pytest.raises(FileNotFoundError, match="no Zorro paradigm files"):
        resolve_zorro_dir(tmp_path)
    partial = tmp_path / "partial"
    partial.mkdir()
    for name in ZORRO_PARADIGMS[:-1]:
        (partial / f"{name}.txt").write_text("a b .\na c .\n")
    with pytest.raises(FileNotFoundError, match="quantifiers-superlative.txt"):
        load_zorro(partial)
    assert len(load_zorro(partial, paradigms=list(ZORRO_PARADIGMS[:2]))) == 2


# --------------------------------------------------------------------------------------------------- runs


def test_masked_lm_run_writes_all_23_paradigms(masked_dir, zorro_root, tmp_path):
    results = run_probe(ProbeConfig(model=str(masked_dir), zorro_dir=str(zorro_root), output_dir=str(tmp_path),
                                    device="cpu", save_scores=True), progress=False)
    assert results.settings["model_kind"] == "mlm" and results.settings["methods"] == ["holistic", "pll"]
    assert list(results.paradigms) == list(ZORRO_PARADIGMS)
    for method in ("holistic", "pll"):
        accs = [results.paradigms[p][method]["accuracy"] for p in ZORRO_PARADIGMS]
        assert results.mean[method] == pytest.approx(sum(accs) / 23)
        assert all(results.paradigms[p][method]["n"] == 2 for p in ZORRO_PARADIGMS)
    data = json.loads((tmp_path / "probe.json").read_text())
    assert data["kind"] == "zorro" and data["model"]["checkpoint_hash"]["sha256"]
    scores = json.loads((tmp_path / "probe_scores.json").read_text())["scores"]
    first = ZORRO_PARADIGMS[0]
    bad_good = scores[first]["pll"]
    assert results.paradigms[first]["pll"]["correct"] == sum(g > b for b, g in bad_good)
    text = (tmp_path / "probe.md").read_text()
    assert "| paradigm | holistic | pll |" in text and "**mean**" in text
    # the default tie rule, as run (the page said "ties count as wrong" under every rule)
    assert "ties broken at random" in text and "count as wrong" not in text
    assert (tmp_path / "probe.png").stat().st_size > 1000


@pytest.mark.parametrize("side, accuracy", [("good", 1.0), ("bad", 0.0)])
def test_causal_lm_trained_on_one_side_of_the_pairs(causal_tokenizer, zorro_root, tmp_path, side, accuracy):
    """A model trained on the grammatical sentences prefers them on every pair; trained on the ungrammatical ones
    it prefers those: the probe reads the pairs the right way round."""
    model = fixtures.causal_lm(causal_tokenizer, seed=1)
    sentences = [good if side == "good" else bad for bad, good in fixtures.ZORRO_PAIRS]
    fixtures.train_on(model, causal_tokenizer, sentences)
    folder = fixtures.save(model, causal_tokenizer, tmp_path / f"trained-{side}")
    results = run_probe(ProbeConfig(model=str(folder), zorro_dir=str(zorro_root), device="cpu"), progress=False)
    assert results.settings["methods"] == ["loglik"] and results.settings["prefix_token"] == "bos"
    assert results.mean["loglik"] == accuracy


def test_method_that_does_not_fit_the_model(ssa_causal_dir, zorro_root):
    with pytest.raises(ValueError, match="need a masked LM"):
        run_probe(ProbeConfig(model=str(ssa_causal_dir), zorro_dir=str(zorro_root), methods=["pll"], device="cpu",
                              paradigms=[ZORRO_PARADIGMS[0]]), progress=False)
    with pytest.raises(ValueError, match="unknown scoring method 'mean'"):
        ProbeConfig(model="m", zorro_dir="z", methods=["mean"]).validate()
