"""Perplexity on random fixed-length windows: sampling, counting, and agreement with the model's own loss."""

import json
import math

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from ssa_hf.evaluation.perplexity import corpus_token_stream, evaluate_perplexity, sample_windows, window_perplexity

from ..conftest import requires_shared_data
from ..data.fixtures import write_jsonl
from ..train.conftest import _datasets_cache, corpora, reference_runs  # noqa: F401  (the trained runs it measures)


def test_windows_are_seeded_and_inside_the_stream():
    starts = sample_windows(1000, 500, 64, seed=3)
    assert starts.min() >= 0 and starts.max() <= 1000 - 64
    assert np.array_equal(starts, sample_windows(1000, 500, 64, seed=3))
    assert not np.array_equal(starts, sample_windows(1000, 500, 64, seed=4))
    assert sample_windows(64, 3, 64, seed=0).tolist() == [0, 0, 0]
    with pytest.raises(ValueError, match="fewer than one window"):
        sample_windows(63, 1, 64, seed=0)
    with pytest.raises(ValueError, match="window_length"):
        sample_windows(100, 1, 1, seed=0)


class _Tokenizer:
    eos_token_id = 0

    def __call__(self, texts, add_special_tokens=False, verbose=False):
        return {"input_ids": [[len(w) for w in t.split()] for t in texts]}


def test_corpus_stream_joins_documents_with_eos():
    stream, documents_read = corpus_token_stream(_Tokenizer(), iter(["a bb", "ccc", "dd e"]))
    assert stream.tolist() == [1, 2, 0, 3, 0, 2, 1, 0] and documents_read == 3


def test_window_perplexity_matches_the_model_loss(reference_runs):
    final = reference_runs("causal").final_dir
    model = AutoModelForCausalLM.from_pretrained(final)
    stream = np.random.default_rng(0).integers(3, 300, size=500)
    starts = np.array([0, 17, 200, 400])
    mean_nll, tokens = window_perplexity(model, stream, starts, 32, batch_size=3)
    assert tokens == 4 * 31
    with torch.no_grad():
        losses = [model(input_ids=torch.tensor(stream[s:s + 32])[None], labels=torch.tensor(stream[s:s + 32])[None]).loss
                  for s in starts]
    assert mean_nll == pytest.approx(float(torch.stack(losses).mean()), rel=1e-5)


def test_perplexity_in_and_out_of_distribution(reference_runs, tmp_path):
    final = reference_runs("causal").final_dir
    other = write_jsonl(tmp_path / "other.jsonl", ["Completely different words: zebra, quantum, 1987, etc."] * 30)
    results = evaluate_perplexity(final, [str(other)], heldout=True, windows=20, window_length=16, seed=1,
                                  batch_size=8, output_dir=str(tmp_path / "out"))
    heldout, ood = results
    assert heldout.data.startswith("held-out documents of") and heldout.corpus_documents == 20
    for result in results:
        assert result.windows == 20 and result.tokens_scored == 20 * 15 and result.window_length == 16
        assert result.perplexity == pytest.approx(math.exp(result.mean_nll))
    assert heldout.perplexity < ood.perplexity  # the model has learned its training distribution
    again = evaluate_perplexity(final, heldout=True, windows=20, window_length=16, seed=1)[0]
    assert again.mean_nll == heldout.mean_nll
    saved = json.loads((tmp_path / "out" / "perplexity.json").read_text())
    assert [r["perplexity"] for r in saved] == [heldout.perplexity, ood.perplexity]
    assert "| windows |" in (tmp_path / "out" / "perplexity.md").read_text()


def test_perplexity_refuses_masked_models_and_missing_inputs(reference_runs):
    with pytest.raises(ValueError, match="needs a causal LM"):
        evaluate_perplexity(reference_runs("masked").final_dir, heldout=True)
    with pytest.raises(ValueError, match="nothing to evaluate"):
        evaluate_perplexity(reference_runs("causal").final_dir)


@pytest.mark.integration
@requires_shared_data("wikitext", "wiki.test.raw")
def test_wikitext_perplexity_command(reference_runs, capsys):
    from ..conftest import SHARED_DATA
    from ssa_hf.cli import main

    final = reference_runs("causal").final_dir
    code = main(["perplexity", final, "--data", str(SHARED_DATA / "wikitext" / "wiki.test.raw"), "--windows", "8",
                 "--window-length", "32", "--max-documents", "200"])
    assert code == 0
    table = capsys.readouterr().out
    assert "wiki.test.raw | 8 | 32 | 248 |" in table


def test_window_length_defaults_to_the_trained_length_and_warns_past_it(reference_runs, tmp_path, caplog, capsys):
    """The run trained on 32-token blocks (its model has 128 positions): 32-token windows unless told otherwise."""
    final = reference_runs("causal").final_dir
    with caplog.at_level("INFO", logger="ssa_hf.perplexity"):
        result = evaluate_perplexity(final, heldout=True, windows=4, seed=1)[0]
    assert result.window_length == 32 and result.tokens_scored == 4 * 31
    assert "windows of 32 tokens: the block size of its training run" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="ssa_hf.perplexity"):
        evaluate_perplexity(final, heldout=True, windows=2, window_length=64, seed=1)
    assert "longer than the 32 the model was trained on" in caplog.text
    # without the training record: max_position_embeddings
    from transformers import AutoConfig

    from ssa_hf.evaluation.perplexity import trained_length

    assert trained_length(tmp_path, AutoConfig.from_pretrained(final)) == (128, "max_position_embeddings in its config")
    # pytest's captured stderr is no terminal: no progress bars of ours in it
    err = capsys.readouterr().err
    assert " windows" not in err and " docs" not in err


def test_progress_bar_counts_windows(reference_runs, capsys):
    final = reference_runs("causal").final_dir
    evaluate_perplexity(final, heldout=True, windows=5, batch_size=2, seed=1, progress=True)
    assert "5/5" in capsys.readouterr().err


def _gpt2_folder(folder, ssa: bool):
    from transformers import GPT2Config, GPT2LMHeadModel

    from ssa_hf import SSAGPT2Config, SSAGPT2LMHeadModel

    from . import fixtures

    tok = fixtures.tokenizer(masked=False)
    shape = dict(vocab_size=len(tok), n_embd=32, n_layer=2, n_head=4, n_positions=64, eos_token_id=tok.eos_token_id)
    model = SSAGPT2LMHeadModel(SSAGPT2Config(**shape)) if ssa else GPT2LMHeadModel(GPT2Config(**shape))
    return fixtures.save(model, tok, folder)


@pytest.mark.parametrize("ssa", [False, True], ids=["stock-gpt2", "ssa-gpt2"])
def test_perplexity_of_gpt2_family_causal_lms(ssa, tmp_path):
    """GPT2LMHeadModel's name does not end in ForCausalLM; it is a causal LM all the same (it was refused)."""
    folder = _gpt2_folder(tmp_path / "gpt2", ssa)
    corpus = write_jsonl(tmp_path / "corpus.jsonl", ["the cat sat on the mat . " * 8] * 6)
    (result,) = evaluate_perplexity(str(folder), [str(corpus)], windows=3, window_length=16, device="cpu")
    assert result.windows == 3 and math.isfinite(result.perplexity)


def test_windows_longer_than_the_positions_are_refused_unless_asked(reference_runs):
    final = reference_runs("causal").final_dir  # 128 positions
    with pytest.raises(ValueError, match=r"window_length 129 is longer than the 128 positions.*--beyond-positions"):
        evaluate_perplexity(final, heldout=True, windows=2, window_length=129, seed=1)
    (result,) = evaluate_perplexity(final, heldout=True, windows=2, window_length=129, seed=1, beyond_positions=True)
    assert result.window_length == 129


def test_a_folder_without_tokenizer_files_gets_ssa_hf_s_message(reference_runs, tmp_path):
    import shutil

    folder = tmp_path / "no_tokenizer"
    shutil.copytree(reference_runs("causal").final_dir, folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (folder / name).unlink(missing_ok=True)
    corpus = write_jsonl(tmp_path / "corpus.jsonl", ["the cat sat on the mat . " * 8] * 6)
    with pytest.raises(FileNotFoundError, match="has no tokenizer files.*name one with --tokenizer"):
        evaluate_perplexity(str(folder), [str(corpus)], windows=2, window_length=16)
    (result,) = evaluate_perplexity(str(folder), [str(corpus)], windows=2, window_length=16,
                                    tokenizer=reference_runs("causal").final_dir)
    assert result.windows == 2
