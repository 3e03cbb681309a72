"""Shared test set-up: offline, deterministic, CPU; tiny model factories used across the suite."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# FlexAttention tests run its unfused eager path unless a test asks for compilation explicitly
os.environ.setdefault("SSA_HF_FLEX_COMPILE", "0")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("SSA_HF_DATA_DIR", REPO.parent / "shared" / "data"))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


def requires_shared_data(*parts: str):
    """Skip (with the reason) when ../shared/data, or the named sub-folder, is absent."""
    path = SHARED_DATA.joinpath(*parts)
    return pytest.mark.skipif(not path.exists(), reason=f"offline data not found at {path} (set SSA_HF_DATA_DIR)")
