"""ssa_hf.data.layout and `ssa-hf data`: the offline data folder built from (stand-ins for) the Hub and the pinned
GitHub files, checked, and read by its consumers; offline: the Hub loader reads local JSON through `datasets`, the
URL fetcher returns local bytes."""

from __future__ import annotations

import gzip
import hashlib
import json

import pytest

from ssa_hf.cli import main
from ssa_hf.data import layout
from ssa_hf.data.sources import resolve_files
from ssa_hf.evaluation.lm_tasks import LOCAL_TASKS, check_task_file

from ..conftest import REPO

ARC_ROW = {"id": "q1", "question": "Which is a metal?", "answerKey": "B",
           "choices": {"text": ["wood", "iron", "glass", "paper"], "label": ["A", "B", "C", "D"]}}
HUB_ROWS = {
    ("allenai/ai2_arc", "ARC-Easy"): [ARC_ROW, {**ARC_ROW, "id": "q2"}],
    ("allenai/ai2_arc", "ARC-Challenge"): [ARC_ROW],
    ("google/boolq", None): [{"question": "is it", "answer": True, "passage": "It is."},
                             {"question": "is it not", "answer": False, "passage": "No."}],
    ("Rowan/hellaswag", None): [{"ind": 4, "activity_label": "Cooking", "ctx_a": "A man cuts onions.",
                                 "ctx_b": "he", "label": "2",
                                 "endings": ["cries [title] a lot.", "sings.", "eats  them.", "leaves."]}],
    ("baber/piqa", None): [{"goal": "open a jar", "sol1": "twist", "sol2": "push", "label": 0},
                           {"goal": "dry hair", "sol1": "water", "sol2": "towel", "label": 1}],
    ("Salesforce/wikitext", "wikitext-2-raw-v1"): [{"text": ""}, {"text": " = Title = \n"}, {"text": " Some text .\n"}],
    ("allenai/c4", "en"): [{"text": f"document {i}", "url": f"https://example.org/{i}", "timestamp": "2019-04-20"}
                           for i in range(5)],
}


@pytest.fixture
def offline_sources(tmp_path, monkeypatch):
    """The Hub read from local JSON files through `datasets`' json loader; GitHub files from made-up bytes whose
    SHA-256 is pinned for the test. Returns the calls made."""
    from datasets import load_dataset

    hub = tmp_path / "hub"
    hub.mkdir()
    calls = []

    def load_hub_rows(repo_id, config, split, limit=None):
        calls.append((repo_id, config, split, limit))
        rows = HUB_ROWS[repo_id, config]
        path = hub / f"{repo_id.replace('/', '__')}__{config}__{split}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        data = load_dataset("json", data_files=str(path), split="train")
        return iter([dict(r) for r in data][:limit])

    blobs = {}
    for name in layout.PINNED:
        blob = (f"{name} line one .\n{name} line two .\n").encode()
        blobs[name] = blob
        monkeypatch.setitem(layout.PINNED, name, hashlib.sha256(blob).hexdigest())

    def fetch_url(url):
        calls.append(url)
        if "/phueb/Zorro/" in url:
            version = next(v for v, (commit, _) in layout.ZORRO_COMMITS.items() if f"/{commit}/" in url)
            return blobs[f"zorro/{version}/{url.rsplit('/', 1)[1]}"]
        return blobs[f"aochildes/{url.rsplit('/', 1)[1]}"]

    monkeypatch.setattr(layout, "load_hub_rows", load_hub_rows)
    monkeypatch.setattr(layout, "fetch_url", fetch_url)
    return calls


def test_download_builds_the_layout_its_consumers_read(tmp_path, offline_sources):
    root = tmp_path / "data"
    written = layout.download(root, log=lambda *_: None)
    assert sorted(p.name for p in written) == sorted(layout.DATASETS)
    assert layout.check(root) == []
    for name, dataset in layout.DATASETS.items():
        folder = root / name
        sums = dict(reversed(line.split("  ", 1)) for line in (folder / layout.CHECKSUM_FILE).read_text().splitlines())
        assert set(dataset.files) <= set(sums)
        assert all(hashlib.sha256((folder / f).read_bytes()).hexdigest() == d for f, d in sums.items())
        source = json.loads((folder / layout.SOURCE_FILE).read_text())
        assert source["data_set"] == name and source["license"] == dataset.license
    assert not list(root.glob(".*.partial"))
    # the eval tasks' own record checks accept what was written (piqa's labels are joined at run time)
    for task in ("arc_easy", "arc_challenge", "boolq", "hellaswag", "piqa"):
        spec = LOCAL_TASKS[task]
        assert check_task_file(spec, root / spec.files[spec.eval_split]) >= 1
    hellaswag = json.loads(gzip.decompress((root / "hellaswag/hellaswag_val.jsonl.gz").read_bytes()))
    assert hellaswag == {"ind": 4, "query": "Cooking: A man cuts onions. He", "label": 2,
                         "endings": ["cries. a lot.", "sings.", "eats them.", "leaves."]}
    assert (root / "piqa/valid-labels.lst").read_text() == "0\n1\n"
    assert (root / "wikitext/wiki.test.raw").read_text() == "\n = Title = \n Some text .\n"
    assert ("allenai/c4", "en", "validation", layout.C4_DOCUMENTS) in offline_sources  # only the first 2,000
    # the pretraining configs' paths resolve in it
    assert resolve_files(str(root / "aochildes/aochildes.train")) and resolve_files(
        str(root / "webtext_c4/c4_en_validation_2k.jsonl.gz"))


def test_check_finds_changed_and_missing_files(tmp_path, offline_sources):
    root = tmp_path / "data"
    layout.download(root, ["boolq", "arc"], log=lambda *_: None)
    assert layout.check(root, ["boolq", "arc"]) == []
    (root / "boolq/validation.jsonl").write_text("{}\n")
    (root / "arc/ARC-Easy-test.jsonl").unlink()
    problems = layout.check(root, ["boolq", "arc"])
    assert "boolq/validation.jsonl: checksum differs from SHA256SUMS" in problems
    assert "arc/ARC-Easy-test.jsonl is missing" in problems
    assert layout.check(root, ["piqa"]) == ["piqa/ is missing"]
    with pytest.raises(ValueError, match="fails the check.*remove it"):
        layout.download(root, ["boolq"], log=lambda *_: None)


def test_a_pinned_file_with_other_content_writes_nothing(tmp_path, offline_sources, monkeypatch):
    monkeypatch.setitem(layout.PINNED, "aochildes/aochildes.dev", "0" * 64)
    with pytest.raises(ValueError, match="is not the pinned"):
        layout.download(tmp_path / "data", ["aochildes"], log=lambda *_: None)
    assert not (tmp_path / "data/aochildes").exists() and not list((tmp_path / "data").glob(".*"))


def test_unknown_names_are_refused():
    with pytest.raises(ValueError, match="unknown data sets \\['fineweb'\\]"):
        layout.selected(["fineweb"])


def test_data_command_downloads_and_checks(tmp_path, offline_sources, capsys):
    root = tmp_path / "data"
    assert main(["data", "download", "--to", str(root), "--only", "piqa", "wikitext"]) == 0
    assert main(["data", "check", str(root), "--only", "piqa", "wikitext"]) == 0
    assert "complete" in capsys.readouterr().out
    (root / "piqa/valid-labels.lst").write_text("1\n1\n")
    assert main(["data", "check", str(root), "--only", "piqa"]) == 1
    assert "piqa/valid-labels.lst: checksum differs" in capsys.readouterr().out


def test_a_tiny_config_without_its_data_names_the_download_command(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SSA_HF_DATA_DIR", str(tmp_path))
    monkeypatch.chdir(REPO)
    for config in ("tiny_causal", "tiny_masked"):
        rc = main(["pretrain", "--config", f"configs/pretrain/{config}.yaml", "--output_dir", str(tmp_path / config)])
        lines = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(lines) == 1 and "ssa-hf data download --to DIR" in lines[0], lines
        assert not (tmp_path / config / "checkpoints").exists()
