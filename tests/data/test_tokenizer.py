"""Byte-level BPE training and the transformers tokenizer it is saved as."""

import pytest
from transformers import AutoTokenizer

from ssa_hf.data.tokenizer import TokenizerConfig, load_pretrained_tokenizer, special_token_ids, train_bpe_tokenizer

from .fixtures import sentences

CORPUS = sentences(400, seed=1)


@pytest.fixture(scope="module")
def masked_tokenizer():
    return train_bpe_tokenizer(CORPUS, "masked", vocab_size=320, model_max_length=64)


@pytest.fixture(scope="module")
def causal_tokenizer():
    return train_bpe_tokenizer(CORPUS, "causal", vocab_size=320)


def test_roberta_style_special_tokens(masked_tokenizer, causal_tokenizer):
    for tok in (masked_tokenizer, causal_tokenizer):
        assert (tok.bos_token_id, tok.pad_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2, 3)
        assert len(tok) == 320
    assert masked_tokenizer.mask_token_id == 4
    assert causal_tokenizer.mask_token is None
    assert special_token_ids(masked_tokenizer) == {"vocab_size": 320, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2}


def test_masked_inputs_are_wrapped_and_causal_inputs_are_not(masked_tokenizer, causal_tokenizer):
    ids = masked_tokenizer("the cat sees the ball .")["input_ids"]
    assert ids[0] == 0 and ids[-1] == 2 and len(ids) > 3
    plain = causal_tokenizer("the cat sees the ball .")["input_ids"]
    assert 0 not in plain and 2 not in plain
    # a leading space on the first word for masked LMs: "cat" alone and " cat" inside a sentence agree
    assert masked_tokenizer("cat", add_special_tokens=False)["input_ids"] == masked_tokenizer(
        "the cat", add_special_tokens=False)["input_ids"][1:]


@pytest.mark.parametrize("text", ["the dog <mask>", "the <mask> sees the ball .", "<mask> dog", "the dog <mask> ."])
def test_the_mask_token_takes_the_space_before_it(tmp_path, masked_tokenizer, text):
    """As RoBERTa's (lstrip): "the dog <mask>" is the tokens of "the dog" then <mask>, no stray space token."""
    def tokens(tokenizer, piece):
        return tokenizer(piece, add_special_tokens=False)["input_ids"] if piece.strip() else []

    before, after = text.split("<mask>")
    expected = tokens(masked_tokenizer, before.rstrip()) + [4] + tokens(masked_tokenizer, after)
    masked_tokenizer.save_pretrained(tmp_path)
    for tokenizer in (masked_tokenizer, AutoTokenizer.from_pretrained(tmp_path)):
        assert tokenizer(text, add_special_tokens=False)["input_ids"] == expected


def test_saved_tokenizer_loads_with_autotokenizer(tmp_path, masked_tokenizer):
    masked_tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    text = "my friend reads a book in the garden ."
    assert loaded(text)["input_ids"] == masked_tokenizer(text)["input_ids"]
    assert loaded.decode(loaded(text, add_special_tokens=False)["input_ids"]).strip() == text
    assert (loaded.mask_token, loaded.pad_token, loaded.model_max_length) == ("<mask>", "<pad>", 64)


def test_pretrained_tokenizer_is_completed_or_refused(tmp_path, causal_tokenizer):
    causal_tokenizer.save_pretrained(tmp_path)
    loaded = load_pretrained_tokenizer(str(tmp_path), "causal")
    assert loaded.pad_token == "<pad>"
    with pytest.raises(ValueError, match="no mask token"):
        load_pretrained_tokenizer(str(tmp_path), "masked")


def test_training_errors():
    with pytest.raises(ValueError, match="empty corpus"):
        train_bpe_tokenizer([], "causal", vocab_size=300)
    with pytest.raises(ValueError, match="task"):
        train_bpe_tokenizer(CORPUS, "seq2seq")
    with pytest.raises(ValueError, match="vocab_size"):
        TokenizerConfig(vocab_size=100).validate()
