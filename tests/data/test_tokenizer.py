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


def test_causal_tokenizers_pad_on_the_left_and_keep_it_when_saved(tmp_path, causal_tokenizer, masked_tokenizer):
    """Batched generate needs left padding; the trained causal tokenizer padded on the right."""
    batch = causal_tokenizer(["the cat", "every child likes the ball ."], padding=True)
    assert batch["attention_mask"][0][0] == 0 and batch["attention_mask"][0][-1] == 1
    causal_tokenizer.save_pretrained(tmp_path / "causal")
    assert AutoTokenizer.from_pretrained(tmp_path / "causal").padding_side == "left"
    assert masked_tokenizer.padding_side == "right"


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


def test_trained_tokenizer_loads_without_custom_code_or_a_prompt(tmp_path, masked_tokenizer):
    """A checkpoint folder holds remote code for the model; its tokenizer must load with transformers' own classes,
    and AutoTokenizer (which reads config.json) must not stop on the trust_remote_code prompt once ssa_hf is
    imported. Run in fresh processes with no terminal (the prompt would print, then fail or wait 15 s)."""
    import json
    import os
    import subprocess
    import sys

    from ssa_hf.hub import save_checkpoint_folder
    from tests.models.tiny import build

    from ..conftest import REPO

    model_dir = save_checkpoint_folder(build("bert"), tmp_path / "model", masked_tokenizer, card=False)
    masked_tokenizer.save_pretrained(tmp_path / "tokenizer")
    for folder in (model_dir, tmp_path / "tokenizer"):
        saved = json.loads((folder / "tokenizer_config.json").read_text())
        assert "auto_map" not in saved and saved["tokenizer_class"] in ("TokenizersBackend", "PreTrainedTokenizerFast")
    expected = masked_tokenizer("the dog <mask>")["input_ids"]
    script = (  # without ssa_hf: the stock class on the model folder, AutoTokenizer on the tokenizer folder;
        # then AutoTokenizer on the model folder once ssa_hf is imported
        "from transformers import AutoTokenizer, PreTrainedTokenizerFast\n"
        f"print(PreTrainedTokenizerFast.from_pretrained({str(model_dir)!r})('the dog <mask>')['input_ids'])\n"
        f"print(AutoTokenizer.from_pretrained({str(tmp_path / 'tokenizer')!r})('the dog <mask>')['input_ids'])\n"
        "import ssa_hf\n"
        f"print(AutoTokenizer.from_pretrained({str(model_dir)!r})('the dog <mask>')['input_ids'])\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO)), stdin=subprocess.DEVNULL, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "custom code" not in result.stdout + result.stderr
    assert result.stdout.strip().splitlines() == [str(expected)] * 3


def test_a_trained_tokenizer_folder_loads_with_the_stock_class_alone(tmp_path):
    """The folder a run saves its tokenizer in (output_dir/tokenizer, checkpoints' tokenizer/) names a stock
    tokenizer class and no remote code: plain `AutoTokenizer.from_pretrained(folder)`, in a fresh process without
    ssa_hf and without a terminal, loads it with no trust_remote_code prompt. (A model folder also holds config.json,
    whose auto_map points at the model's code: transformers' AutoTokenizer reads that config first, so there pass
    trust_remote_code=False; see docs/pretraining.md.)"""
    import json
    import os
    import subprocess
    import sys

    tokenizer = train_bpe_tokenizer(["the dog runs", "a cat sits on the mat"] * 40, "masked", vocab_size=300)
    tokenizer.save_pretrained(str(tmp_path / "tokenizer"))
    config = json.loads((tmp_path / "tokenizer" / "tokenizer_config.json").read_text())
    assert "auto_map" not in config and not list((tmp_path / "tokenizer").glob("*.py"))
    script = ("import sys; from transformers import AutoTokenizer\n"
              f"t = AutoTokenizer.from_pretrained({str(tmp_path / 'tokenizer')!r})\n"
              "assert not any(m.startswith('ssa_hf') for m in sys.modules)\n"
              "print(type(t).__module__.split('.')[0], t('the dog <mask>')['input_ids'])\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                            env=dict(env, HF_HUB_OFFLINE="1"), cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "custom code" not in result.stdout + result.stderr
    assert result.stdout.split()[0] == "transformers"
    assert result.stdout.split(" ", 1)[1].strip() == str(tokenizer("the dog <mask>")["input_ids"])
