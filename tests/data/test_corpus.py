"""Packing, BabyBERTa masking, held-out splits and resumable batch streams."""

import pytest
import torch

from ssa_hf.data.corpus import (
    DataConfig,
    MapBatchStream,
    MaskedCollator,
    batch_generator,
    build_corpus,
    iter_text_column,
    mask_tokens,
    pack_documents,
    split_validation,
)
from ssa_hf.data.sources import TextSource
from ssa_hf.data.tokenizer import train_bpe_tokenizer

from .fixtures import documents, sentences, write_jsonl, write_text


def test_packing_joins_documents_with_eos_and_drops_the_remainder():
    blocks = pack_documents([[5, 6, 7], [8], [9, 10, 11, 12]], eos_id=2, block_size=4)
    # stream: 5 6 7 2 8 2 9 10 11 12 2 -> two full blocks, 3 tokens dropped
    assert blocks == [[5, 6, 7, 2], [8, 2, 9, 10]]
    assert pack_documents([[1, 2]], eos_id=0, block_size=4) == []


def _maskable_batch(rows=64, length=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(10, 300, (rows, length), generator=g)
    maskable = torch.ones_like(ids, dtype=torch.bool)
    maskable[:, 0] = maskable[:, -1] = False  # <s> ... </s>
    maskable[::2, 30:] = False  # padding
    return ids, maskable


def test_masking_replaces_every_selected_token_with_mask():
    ids, maskable = _maskable_batch()
    inputs, labels = mask_tokens(ids, maskable, mask_token_id=4, probability=0.15, generator=batch_generator(0, 1))
    selected = labels != -100
    assert torch.equal(inputs[selected], torch.full((int(selected.sum()),), 4))  # never kept, never random
    assert torch.equal(inputs[~selected], ids[~selected])
    assert torch.equal(labels[selected], ids[selected])
    assert not (selected & ~maskable).any()  # specials and padding never selected
    rate = selected.sum() / maskable.sum()
    assert 0.12 < float(rate) < 0.18


def test_masking_gives_every_sentence_a_target_and_is_seeded():
    ids = torch.arange(10, 16).repeat(200, 1)
    maskable = torch.ones_like(ids, dtype=torch.bool)
    maskable[:, 0] = maskable[:, -1] = False
    _, labels = mask_tokens(ids, maskable, 4, 0.15, batch_generator(3, 7))
    assert ((labels != -100).sum(1) >= 1).all()  # 4 maskable tokens at 15%: many rows would have none
    _, again = mask_tokens(ids, maskable, 4, 0.15, batch_generator(3, 7))
    _, other = mask_tokens(ids, maskable, 4, 0.15, batch_generator(3, 8))
    assert torch.equal(labels, again) and not torch.equal(labels, other)


@pytest.fixture(scope="module")
def masked_tokenizer():
    return train_bpe_tokenizer(sentences(300, seed=2), "masked", vocab_size=300)


def test_masked_collator_pads_and_masks(masked_tokenizer):
    rows = [masked_tokenizer(t)["input_ids"] for t in sentences(8, seed=3)]
    batch = MaskedCollator(masked_tokenizer, 0.15)(rows, batch_generator(0, 0))
    lengths = [len(r) for r in rows]
    assert batch["input_ids"].shape == (8, max(lengths))
    assert batch["attention_mask"].sum(1).tolist() == lengths
    pad = batch["attention_mask"] == 0
    assert (batch["input_ids"][pad] == masked_tokenizer.pad_token_id).all() and (batch["labels"][pad] == -100).all()
    assert (batch["labels"][:, 0] == -100).all()  # <s> is never a target


def test_map_stream_order_is_seeded_global_and_resumable():
    data = {"input_ids": [[i] for i in range(50)]}

    class Rows:  # the slice of `datasets.Dataset` the stream uses
        def __len__(self):
            return 50

        def __getitem__(self, idx):
            return {"input_ids": [data["input_ids"][i] for i in idx]}

    single = MapBatchStream(Rows(), per_device=8, rank=0, world=1, seed=5)
    ranks = [MapBatchStream(Rows(), per_device=4, rank=r, world=2, seed=5) for r in range(2)]
    for _ in range(9):  # crosses an epoch boundary (6 global batches of 8 per epoch of 50)
        whole = single.next_batch()
        parts = [s.next_batch() for s in ranks]
        assert parts[0] + parts[1] == whole  # two processes read the single process's batch, split in two
        assert not set(map(tuple, parts[0])) & set(map(tuple, parts[1]))
    assert single.epoch == 1
    state = single.state_dict()
    expected = [single.next_batch() for _ in range(5)]
    resumed = MapBatchStream(Rows(), per_device=8, rank=0, world=1, seed=5)
    resumed.load_state_dict(state)
    assert [resumed.next_batch() for _ in range(5)] == expected
    other_seed = MapBatchStream(Rows(), per_device=8, rank=0, world=1, seed=6)
    assert other_seed.next_batch() != MapBatchStream(Rows(), per_device=8, rank=0, world=1, seed=5).next_batch()
    with pytest.raises(ValueError, match="fewer than one global micro-batch"):
        MapBatchStream(Rows(), per_device=40, rank=0, world=2, seed=0)


@pytest.fixture
def causal_setup(tmp_path):
    docs = documents(60, per_document=6, seed=4)
    path = write_jsonl(tmp_path / "docs.jsonl", docs)
    tokenizer = train_bpe_tokenizer(docs, "causal", vocab_size=300)
    return path, tokenizer, docs


def test_held_out_split_is_disjoint_and_seeded(causal_setup):
    path, _, docs = causal_setup
    config = DataConfig(train=TextSource(path=str(path)), validation_documents=10)
    train, validation = split_validation(config, seed=0)
    train_texts, held = list(iter_text_column(train)), list(iter_text_column(validation))
    assert len(held) == 10 and len(train_texts) == 50
    assert sorted(train_texts + held) == sorted(docs) and not set(train_texts) & set(held)
    assert list(iter_text_column(split_validation(config, seed=0)[1])) == held
    assert list(iter_text_column(split_validation(config, seed=1)[1])) != held
    streamed = DataConfig(train=TextSource(path=str(path), streaming=True), validation_documents=10)
    s_train, s_validation = split_validation(streamed, seed=0)
    assert list(iter_text_column(s_validation)) == docs[:10] and list(iter_text_column(s_train)) == docs[10:]
    with pytest.raises(ValueError, match="holds out all"):
        split_validation(DataConfig(train=TextSource(path=str(path)), validation_documents=60))


@pytest.mark.parametrize("streaming", [False, True])
def test_causal_corpus_blocks_and_stream_resume(causal_setup, streaming):
    path, tokenizer, _ = causal_setup
    config = DataConfig(train=TextSource(path=str(path), streaming=streaming), validation_documents=10,
                        block_size=16, pack_documents=7)
    corpus = build_corpus(config, tokenizer, "causal", seed=0, show_progress=False)
    assert corpus.streaming is streaming
    assert corpus.validation and all(len(b) == 16 for b in corpus.validation)
    assert any(tokenizer.eos_token_id in b for b in corpus.validation)
    stream = corpus.batch_stream(4, 0, 1, 0, config)
    for _ in range(3):
        assert all(len(r) == 16 for r in stream.next_batch())
    state = stream.state_dict()
    expected = []
    while stream.epoch == 0 and len(expected) < 1000:  # read into the next epoch
        expected.append(stream.next_batch())
    expected += [stream.next_batch() for _ in range(3)]
    assert stream.epoch == 1
    resumed = corpus.batch_stream(4, 0, 1, 0, config)
    resumed.load_state_dict(state)
    assert [resumed.next_batch() for _ in expected] == expected


def test_streamed_data_is_split_between_processes(causal_setup):
    path, tokenizer, _ = causal_setup
    files = [write_jsonl(path.parent / f"part{i}.jsonl", documents(20, 6, seed=10 + i)) for i in range(2)]
    config = DataConfig(train=TextSource(path=str(path.parent / "part*.jsonl"), streaming=True),
                        validation_documents=0, block_size=16)
    corpus = build_corpus(config, tokenizer, "causal", show_progress=False)
    first = [corpus.batch_stream(2, r, 2, 0, config).next_batch() for r in range(2)]
    assert first[0] != first[1]
    assert len(files) == 2


def test_masked_corpus_one_sentence_per_input(tmp_path, masked_tokenizer):
    lines = sentences(80, seed=5) + ["word " * 100]
    path = write_text(tmp_path / "utterances.train", lines)
    validation = write_text(tmp_path / "utterances.dev", sentences(30, seed=6))
    config = DataConfig(train=TextSource(path=str(path)), validation=TextSource(path=str(validation)),
                        validation_documents=12, max_length=20)
    corpus = build_corpus(config, masked_tokenizer, "masked", show_progress=False)
    assert len(corpus.train) == 81 and len(corpus.validation) == 12
    rows = corpus.train["input_ids"]
    assert all(r[0] == 0 and r[-1] == 2 and len(r) <= 20 for r in rows)
    assert max(len(r) for r in rows) == 20  # the long line was truncated, not dropped


def test_data_config_errors():
    with pytest.raises(ValueError, match="mlm_probability"):
        DataConfig(train=TextSource(path="x.txt"), mlm_probability=1.5).validate("masked")
    with pytest.raises(ValueError, match="block_size"):
        DataConfig(train=TextSource(path="x.txt"), block_size=1).validate("causal")


def test_a_record_without_text_is_named(masked_tokenizer):
    from ssa_hf.data.corpus import CausalEncoder, MaskedEncoder

    for encoder in (CausalEncoder(masked_tokenizer, 8), MaskedEncoder(masked_tokenizer, 8)):
        with pytest.raises(ValueError, match="record 6 of the data set: the text is NoneType"):
            encoder({"text": ["fine", None]}, [5, 6])


@pytest.mark.parametrize("task", ["causal", "masked"])
def test_the_examples_and_their_order_do_not_depend_on_num_proc(task, causal_setup, masked_tokenizer, tmp_path,
                                                                monkeypatch):
    """Each num_proc gets its own empty datasets cache (a shared one could hand one setting's result to another)."""
    import datasets

    path, causal_tokenizer, _ = causal_setup
    tokenizer = causal_tokenizer if task == "causal" else masked_tokenizer
    if task == "masked":
        path = write_text(tmp_path / "utterances.train", sentences(90, seed=7))
    found = {}
    for num_proc in (None, 1, 2, 3):
        monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / f"cache_{num_proc}")
        config = DataConfig(train=TextSource(path=str(path)), validation_documents=10, block_size=16, max_length=20,
                            pack_documents=7, num_proc=num_proc)
        found[num_proc] = build_corpus(config, tokenizer, task, seed=0, show_progress=False).train["input_ids"]
    assert found[None] and all(rows == found[None] for rows in found.values())
