import pytest


@pytest.fixture(autouse=True)
def _datasets_cache(tmp_path_factory, monkeypatch):
    """Keep the `datasets` cache of these tests in a temporary folder (not ~/.cache)."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path_factory.getbasetemp() / "hf_datasets_cache")
