"""Fixtures of the training tests: tiny corpora written here, tiny configs, and the uninterrupted reference runs
(computed once per test process and shared by the end-to-end, resume and perplexity tests)."""

from __future__ import annotations

import pytest

from ssa_hf.train import PretrainConfig, load_config, pretrain
from ssa_hf.options import deep_merge

from ..data.fixtures import documents, sentences, write_jsonl, write_text


@pytest.fixture(scope="session", autouse=True)
def _datasets_cache(tmp_path_factory):
    """Keep the `datasets` cache of these tests in a temporary folder (not ~/.cache)."""
    import datasets

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path_factory.mktemp("hf_datasets_cache"))
        yield


@pytest.fixture(scope="session")
def corpora(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpora")
    return {
        "causal": write_jsonl(folder / "web.jsonl.gz", documents(120, per_document=8, seed=0), gz=True),
        "masked": write_text(folder / "speech.train", sentences(800, seed=1)),
        "masked_dev": write_text(folder / "speech.dev", sentences(100, seed=2)),
    }


def tiny_config(task: str, corpora, output_dir, **overrides) -> PretrainConfig:
    """A run of a few seconds: the tiny_llama / tiny_bert presets on the synthetic corpora."""
    data = {"train": {"path": str(corpora[task])}, "validation_documents": 20}
    if task == "causal":
        data.update(block_size=32, pack_documents=40)
        model = {"preset": "tiny_llama"}
    else:
        data.update(validation={"path": str(corpora["masked_dev"])}, max_length=24)
        model = {"preset": "tiny_bert", "overrides": {"hidden_dropout_prob": 0.1}}  # dropout: RNG must resume too
    values = {
        "task": task,
        "output_dir": str(output_dir),
        "seed": 0,
        "model": model,
        "tokenizer": {"vocab_size": 300, "train_documents": None},
        "data": data,
        "max_steps": 6,
        "per_device_train_batch_size": 8 if task == "causal" else 16,
        "learning_rate": 1e-2,
        "min_learning_rate": 1e-3,
        "warmup_steps": 1,
        "logging_steps": 1,
        "eval_steps": 3,
        "save_steps": 3,
        "save_total_limit": 1,
        "per_device_eval_batch_size": 16,
        "report_to": ["none"],
    }
    return load_config(None, deep_merge(values, overrides))


@pytest.fixture(scope="session")
def reference_runs(corpora, tmp_path_factory):
    """task -> the uninterrupted 6-step run (with TensorBoard), computed on first use."""
    runs = {}

    def get(task: str):
        if task not in runs:
            folder = tmp_path_factory.mktemp(f"reference_{task}")
            runs[task] = pretrain(tiny_config(task, corpora, folder / "run", report_to=["tensorboard"]))
        return runs[task]

    return get
