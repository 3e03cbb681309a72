"""Fixtures of the hub tests: tiny source checkpoints and their conversions (built once for the package), a recorder in place of the Hub."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ssa_hf.hub import convert_checkpoint

from .helpers import SECRET, SOURCES


@pytest.fixture(scope="package")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("hub")


@pytest.fixture(scope="package")
def sources(workdir):
    """One tiny random checkpoint per supported source architecture: {kind: (folder, model)}."""
    out = {}
    for kind, make in SOURCES.items():
        folder = workdir / f"src_{kind}"
        out[kind] = (folder, make(folder).eval())
    return out


@pytest.fixture(scope="package")
def converted(workdir, sources):
    """Each source converted to softmax and to SSA (n = 2): {(kind, scoring): (folder, ConversionResult)}."""
    out = {}
    for kind, (folder, _) in sources.items():
        for scoring in ("softmax", "ssa"):
            dst = workdir / f"{kind}_{scoring}"
            extra = {"ssa_n_init": 2.0} if scoring == "ssa" else {}
            out[kind, scoring] = (dst, convert_checkpoint(folder, dst, scoring, **extra))
    return out


@pytest.fixture
def ssa_checkpoint(converted, tmp_path):
    """A copy of the converted SSA Llama folder with extra files a training run leaves behind."""
    import shutil

    folder = tmp_path / "ckpt"
    shutil.copytree(converted["llama", "ssa"][0], folder)
    (folder / "checkpoint-10").mkdir()
    (folder / "checkpoint-10" / "optimizer.pt").write_bytes(b"0")
    (folder / ".ckpt.tmp-abc").write_text("partial")
    return folder


@pytest.fixture
def hub_recorder(monkeypatch):
    """Replace the Hub's network calls by recorders; everything else in push runs for real."""
    import huggingface_hub
    from huggingface_hub import HfApi, constants
    from huggingface_hub.repocard import RepoCard

    calls = []

    def create_repo(self, repo_id, **kwargs):
        calls.append(("create_repo", repo_id, kwargs))
        return f"https://huggingface.co/{repo_id}"

    def upload_folder(self, **kwargs):
        from huggingface_hub.utils import filter_repo_objects

        folder = Path(kwargs["folder_path"])
        files = [p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()]
        kept = sorted(filter_repo_objects(files, ignore_patterns=kwargs["ignore_patterns"]))
        calls.append(("upload_folder", kwargs, {f: (folder / f).read_bytes() for f in kept}))
        return f"https://huggingface.co/{kwargs['repo_id']}/commit/abc123"

    def validate(self, repo_type=None):
        calls.append(("validate", str(self)))

    monkeypatch.setattr(HfApi, "create_repo", create_repo)
    monkeypatch.setattr(HfApi, "upload_folder", upload_folder)
    monkeypatch.setattr(RepoCard, "validate", validate)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_TOKEN", SECRET)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: os.environ.get("HF_TOKEN"))
    return calls
