"""ssa_hf.hub.matched: softmax-matched SSA conversion (`init="matched"`) reproduces its source within the stated
tolerance for every family, records it in the card, and refuses what it cannot do."""

from __future__ import annotations

import json

import pytest
import torch

from ssa_hf.cli import main as cli
from ssa_hf.hub import ConversionError, convert_checkpoint
from ssa_hf.hub.matched import MATCHED_B, MATCHED_TOLERANCE, matched_settings
from ssa_hf.models.settings import ScoringParameters

from .helpers import SOURCES, inputs_for, load_converted


@pytest.fixture(scope="module")
def matched(workdir, sources):
    """Each source converted with init='matched': {kind: (folder, ConversionResult)}."""
    out = {}
    for kind, (folder, _) in sources.items():
        dst = workdir / f"{kind}_matched"
        out[kind] = (dst, convert_checkpoint(folder, dst, "ssa", init="matched"))
    return out


@pytest.mark.parametrize("kind", list(SOURCES))
def test_matched_conversion_reproduces_the_source_within_the_tolerance(kind, sources, matched):
    _, source = sources[kind]
    folder, result = matched[kind]
    model = load_converted(folder, kind)
    assert model.config.attention_scoring == "ssa"  # SSA runs (not softmax): the match comes from b and n
    for params in model.scoring_parameters().values():
        assert params["b"] == pytest.approx([MATCHED_B] * 4, rel=1e-5)
        assert params["n"] == pytest.approx([1 / MATCHED_B] * 4, rel=1e-5)
    assert result.init == {"method": "matched", "b": MATCHED_B, "n": 1 / MATCHED_B, "c": pytest.approx(1.0)}
    assert result.output_check["must_match"] and result.output_check["max_abs_diff"] <= result.output_check["tolerance"]
    batch = inputs_for(kind, seed=5, padded=True)  # other inputs than the conversion's own check, padded
    with torch.no_grad():
        expected, got = source(**batch).logits, model(**batch).logits
    keep = batch["attention_mask"].bool()
    diff = float((got[keep] - expected[keep]).abs().max())
    assert diff <= MATCHED_TOLERANCE * max(1.0, float(expected[keep].abs().max()))
    assert diff > 0  # a different computation (SSA's g), not a copy of softmax


def test_matched_default_is_closer_than_a_large_b(sources, matched, tmp_path):
    """The difference to the source shrinks with b (the truncation c b s|s| / 2 of the logits)."""
    folder, _ = sources["llama"]
    coarse = convert_checkpoint(folder, tmp_path / "coarse", "ssa", init="matched", matched_b=0.006).output_check
    fine = matched["llama"][1].output_check
    assert fine["max_abs_diff"] < coarse["max_abs_diff"] / 3


def test_matched_card_and_record(matched):
    folder, result = matched["gpt2"]
    card = (folder / "README.md").read_text()
    assert "softmax-matched (`--init matched`: b = 0.001, n = 1000" in card
    assert f"tolerance {result.output_check['tolerance']:.3g}" in card and "| init | matched |" in card
    assert "needs fine-tuning before its outputs mean anything" not in card
    record = json.loads((folder / "ssa_conversion.json").read_text())
    assert record["init"]["method"] == "matched" and record["source"] == "src_gpt2"


def test_matched_refusals(sources, tmp_path):
    folder, _ = sources["llama"]
    with pytest.raises(ValueError, match="needs attention_scoring='ssa'"):
        convert_checkpoint(folder, tmp_path / "a", "softmax", init="matched")
    with pytest.raises(ValueError, match="chooses ssa_b_init and ssa_n_init itself"):
        convert_checkpoint(folder, tmp_path / "b", "ssa", init="matched", ssa_n_init=3.0)
    with pytest.raises(ValueError, match="output check must run"):
        convert_checkpoint(folder, tmp_path / "c", "ssa", init="matched", check_outputs=False)
    with pytest.raises(ValueError, match=r"b must be in \[0.0001, 1\]"):
        convert_checkpoint(folder, tmp_path / "d", "ssa", init="matched", matched_b=5e-5)
    with pytest.raises(ValueError, match="init='matched' only"):
        convert_checkpoint(folder, tmp_path / "e", "ssa", matched_b=1e-3)
    with pytest.raises(ConversionError, match="pass a smaller matched_b"):
        convert_checkpoint(folder, tmp_path / "f", "ssa", init="matched", matched_b=1.0)
    assert not any((tmp_path / name).exists() for name in "abcdef")


def test_matched_settings_ranges():
    assert matched_settings(1e-4) == {"ssa_b_init": 1e-4, "ssa_n_init": pytest.approx(1e4)}
    with pytest.raises(ValueError):
        matched_settings(2.0)  # n = 0.5 < 1


@pytest.mark.parametrize("parametrization", ["softplus", "exp", "raw"])
def test_small_b_is_kept_by_every_parametrization(parametrization):
    """A learnable b of 1e-4 starts at 1e-4 (softplus once raised any value below 1e-3 to 1e-3)."""
    params = ScoringParameters("ssa", 2, ssa_b_init=1e-4, ssa_n_init=1e4, scoring_parametrization=parametrization)()
    assert params["b"].tolist() == pytest.approx([1e-4, 1e-4], rel=1e-4)
    assert params["n"].tolist() == pytest.approx([1e4, 1e4], rel=1e-6)


def test_convert_command_matched(sources, tmp_path, capsys):
    dst = tmp_path / "cli_matched"
    assert cli(["convert", str(sources["bert"][0]), str(dst), "--init", "matched", "--matched-b", "0.0005"]) == 0
    out = capsys.readouterr().out
    assert "softmax-matched SSA, b=0.0005, n=2000" in out
    assert json.loads((dst / "ssa_conversion.json").read_text())["init"]["b"] == 0.0005
