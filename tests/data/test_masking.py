"""Masking options named like transformers' collator: the produced masks have the declared proportions, and
BabyBERTa's setting never leaves a selected token as it was."""

import pytest
import torch

from ssa_hf.data.corpus import DataConfig, MaskedCollator, batch_generator, check_replace_probs, mask_tokens
from ssa_hf.train.config import load_config

from .fixtures import sentences

MASK_ID = 4
ORDINARY = torch.arange(10, 300)  # the ids a random replacement may draw (sorted)

# (mlm_probability, mask_replace_prob, random_replace_prob): BabyBERTa, the authors' HF run (BERT's 80/10/10),
# all <mask> (the quick presets), and a skewed split
SETTINGS = [(0.15, 0.9, 0.1), (0.15, 0.8, 0.1), (0.15, 1.0, 0.0), (0.3, 0.5, 0.25)]


def _batch(rows=400, length=50, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(10, 300, (rows, length), generator=g)
    maskable = torch.ones_like(ids, dtype=torch.bool)
    maskable[:, 0] = maskable[:, -1] = False
    maskable[::3, 35:] = False  # padding
    return ids, maskable


def _fates(ids, inputs, labels):
    selected = labels != -100
    masked = selected & (inputs == MASK_ID)
    unchanged = selected & (inputs == ids)
    randomised = selected & ~masked & ~unchanged
    return selected, masked, randomised, unchanged


@pytest.mark.parametrize("probability,mask_share,random_share", SETTINGS)
def test_masks_have_the_declared_proportions(probability, mask_share, random_share):
    ids, maskable = _batch()
    inputs, labels = mask_tokens(ids, maskable, MASK_ID, probability, batch_generator(11, 2), mask_share, random_share, ORDINARY)
    selected, masked, randomised, unchanged = _fates(ids, inputs, labels)
    n_selected = int(selected.sum())  # about 0.15 * 18,000 = 2,700: binomial sd of a share <= 0.01
    assert abs(n_selected / int(maskable.sum()) - probability) < 0.01 + 0.5 / maskable.sum(1).float().mean()
    for count, share in ((masked, mask_share), (randomised, random_share), (unchanged, max(0.0, 1 - mask_share - random_share))):
        sd = (share * (1 - share) / n_selected) ** 0.5
        assert abs(int(count.sum()) / n_selected - share) <= 4 * sd + 1e-9
    assert not (selected & ~maskable).any()
    assert torch.equal(inputs[~selected], ids[~selected]) and torch.equal(labels[selected], ids[selected])
    # random replacements are ordinary tokens, never a special one
    assert torch.isin(inputs[randomised], ORDINARY).all()


def test_babyberta_setting_never_leaves_a_selected_token_unchanged():
    ids, maskable = _batch(rows=1000)
    inputs, labels = mask_tokens(ids, maskable, MASK_ID, 0.15, batch_generator(5, 5), 0.9, 0.1, ORDINARY)
    selected, masked, randomised, unchanged = _fates(ids, inputs, labels)
    assert int(unchanged.sum()) == 0
    assert int(randomised.sum()) > 300  # the random share is really used (about 10% of ~7,000)
    assert torch.equal(masked | randomised, selected)


def test_random_replacement_is_uniform_over_the_other_ordinary_tokens():
    ordinary = torch.tensor([10, 11, 12, 13])
    ids = torch.full((4000, 6), 11)
    maskable = torch.ones_like(ids, dtype=torch.bool)
    inputs, labels = mask_tokens(ids, maskable, MASK_ID, 0.5, batch_generator(0, 0), 0.0, 1.0, ordinary)
    drawn = inputs[labels != -100]
    assert 11 not in drawn.tolist()
    counts = torch.bincount(drawn, minlength=14)[[10, 12, 13]].float()
    assert (counts / counts.sum() - 1 / 3).abs().max() < 0.02


def test_default_options_keep_the_seeded_all_mask_behaviour():
    ids, maskable = _batch(rows=50)
    plain = mask_tokens(ids, maskable, MASK_ID, 0.15, batch_generator(3, 1))
    explicit = mask_tokens(ids, maskable, MASK_ID, 0.15, batch_generator(3, 1), 1.0, 0.0)
    assert all(torch.equal(a, b) for a, b in zip(plain, explicit))
    assert (plain[0][plain[1] != -100] == MASK_ID).all()


@pytest.mark.parametrize("mask_share,random_share", [(0.9, 0.2), (-0.1, 0.0), (1.5, 0.0), (0.8, True)])
def test_bad_shares_are_refused(mask_share, random_share):
    with pytest.raises(ValueError, match="replace_prob"):
        check_replace_probs(mask_share, random_share)
    overrides = {"task": "masked", "data.train": "x.txt", "data.mask_replace_prob": mask_share,
                 "data.random_replace_prob": random_share}
    with pytest.raises(ValueError, match="data.*replace_prob"):
        load_config(None, overrides)


def test_random_replacement_without_token_ids_is_refused():
    ids, maskable = _batch(rows=4)
    with pytest.raises(ValueError, match="ordinary_ids"):
        mask_tokens(ids, maskable, MASK_ID, 0.15, batch_generator(0, 0), 0.8, 0.1)


@pytest.fixture(scope="module")
def masked_tokenizer():
    from ssa_hf.data.tokenizer import train_bpe_tokenizer

    return train_bpe_tokenizer(sentences(300, seed=2), "masked", vocab_size=300)


def test_collator_from_config_uses_the_shares_and_draws_no_special_token(masked_tokenizer):
    config = DataConfig(train="x.txt", mlm_probability=0.3, mask_replace_prob=0.0, random_replace_prob=1.0)
    collator = MaskedCollator.from_config(masked_tokenizer, config)
    rows = [masked_tokenizer(t)["input_ids"] for t in sentences(64, seed=4)]
    batch = collator(rows, batch_generator(0, 0))
    selected = batch["labels"] != -100
    replaced = batch["input_ids"][selected]
    specials = torch.tensor(masked_tokenizer.all_special_ids)
    assert selected.any() and not torch.isin(replaced, specials).any()
    assert (replaced != batch["labels"][selected]).all()  # a random token is never the original


PRESETS = "configs/pretrain"


@pytest.mark.parametrize(
    "preset,expected",
    [
        ("babyberta_aochildes_ssa.yaml", (0.15, 0.9, 0.1)),
        ("babyberta_aochildes_softmax.yaml", (0.15, 0.9, 0.1)),
        ("babyberta_aochildes_hf_ssa.yaml", (0.15, 0.8, 0.1)),
        ("babyberta_aochildes_hf_softmax.yaml", (0.15, 0.8, 0.1)),
        ("tiny_masked.yaml", (0.15, 1.0, 0.0)),
    ],
)
def test_presets_declare_their_masking(preset, expected, monkeypatch, tmp_path):
    from pathlib import Path

    monkeypatch.setenv("SSA_HF_DATA_DIR", str(tmp_path))
    root = Path(__file__).resolve().parents[2]
    config = load_config(root / PRESETS / preset)
    data = config.data
    assert (data.mlm_probability, data.mask_replace_prob, data.random_replace_prob) == expected
