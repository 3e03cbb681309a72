"""What `push` publishes: only the installed package's remote code (a planted or changed *.py is refused, or
replaced with --refresh-code), every *.py named; never a link out of the folder unless asked (--follow-links),
and then named. The Hub's calls are recorded, never made."""

from __future__ import annotations

import json
import shutil

import pytest

from ssa_hf.cli import main
from ssa_hf.hub import push_to_hub
from ssa_hf.hub.publish import installed_code_dir

from ..evaluation import fixtures as eval_fixtures
from ..hub.conftest import hub_recorder  # noqa: F401  (fixture)
from .conftest import PLANTED_CODE


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    from ssa_hf.hub import save_checkpoint_folder

    tokenizer = eval_fixtures.tokenizer(masked=False)
    return save_checkpoint_folder(eval_fixtures.causal_lm(tokenizer), tmp_path_factory.mktemp("saved") / "model",
                                  tokenizer=tokenizer)


@pytest.fixture
def folder(saved, tmp_path):
    copy = tmp_path / "model"
    shutil.copytree(saved, copy)
    return copy


def _plant_modeling(folder, marker):
    (folder / "modeling_ssa_llama.py").write_text(PLANTED_CODE.format(marker=str(marker)))


def _plant_tokenizer_module(folder, marker):
    (folder / "tokenization_planted.py").write_text(PLANTED_CODE.format(marker=str(marker)))
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["auto_map"] = {"AutoTokenizer": ["tokenization_planted.PlantedTokenizer", None]}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))


def _plant_extra_module(folder, marker):
    (folder / "helpers.py").write_text(PLANTED_CODE.format(marker=str(marker)))


def _edit_scoring(folder, marker):
    with open(folder / "scoring.py", "a") as handle:
        handle.write("\n# an edit\n")


PLANTS = {"modeling file replaced": (_plant_modeling, "differ from the installed"),
          "tokenizer auto_map module": (_plant_tokenizer_module, "not among the installed"),
          "extra module": (_plant_extra_module, "not among the installed"),
          "one line added": (_edit_scoring, "differ from the installed")}


@pytest.mark.parametrize("dry_run", [True, False])
@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_push_refuses_remote_code_that_is_not_the_installed_packages(plant, dry_run, folder, hub_recorder, marker):
    make, message = PLANTS[plant]
    make(folder, marker)
    with pytest.raises(ValueError, match=message):
        push_to_hub(folder, "someone/x", dry_run=dry_run)
    assert hub_recorder == [] and not marker.exists()


def test_refresh_code_replaces_the_folders_code_by_the_installed_files(folder, hub_recorder, marker, capsys):
    _plant_modeling(folder, marker)
    assert main(["push", str(folder), "someone/x", "--refresh-code", "--no-validate-online"]) == 0
    out = capsys.readouterr().out
    uploaded = hub_recorder[-1][2]
    code = sorted(name for name in uploaded if name.endswith(".py"))
    assert code and all(uploaded[name] == (installed_code_dir() / name).read_bytes() for name in code)
    assert "replaced by the installed" in out and "modeling_ssa_llama.py" in out
    for name in code:  # every *.py uploaded is named
        assert name in out.split("remote code (")[1].splitlines()[0]
    assert not marker.exists()


def test_a_failed_push_puts_the_refreshed_code_back(folder, hub_recorder, monkeypatch, marker):
    from huggingface_hub import HfApi

    _plant_modeling(folder, marker)
    planted = (folder / "modeling_ssa_llama.py").read_bytes()
    monkeypatch.setattr(HfApi, "upload_folder", lambda self, **kw: (_ for _ in ()).throw(RuntimeError("boom")))
    assert main(["push", str(folder), "someone/x", "--refresh-code", "--no-validate-online"]) == 1
    assert (folder / "modeling_ssa_llama.py").read_bytes() == planted


@pytest.mark.parametrize("name", ["secret.txt", "scoring.py", "sub/credentials"])
def test_push_refuses_a_link_out_of_the_folder(name, folder, hub_recorder, tmp_path, capsys):
    secret = tmp_path / "hf_token"
    secret.write_text("hf_secret")
    link = folder / name
    link.parent.mkdir(exist_ok=True)
    link.unlink(missing_ok=True)
    link.symlink_to(secret)
    assert main(["push", str(folder), "someone/x", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "leading out of the folder" in err and name in err and "--follow-links" in err
    assert hub_recorder == []


def test_follow_links_uploads_the_targets_content_and_names_it(folder, hub_recorder, tmp_path, capsys):
    target = tmp_path / "notes.md"
    target.write_text("shared notes")
    (folder / "NOTES.md").symlink_to(target)
    assert main(["push", str(folder), "someone/x", "--follow-links", "--no-validate-online"]) == 0
    assert f"NOTES.md -> {target}" in capsys.readouterr().out
    assert hub_recorder[-1][2]["NOTES.md"] == b"shared notes"


def test_a_linked_folder_out_is_refused_even_with_follow_links(folder, hub_recorder, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (folder / "extra").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(ValueError, match="link to the folder"):
        push_to_hub(folder, "someone/x", dry_run=True, follow_links=True)


def test_a_saved_folder_pushes_and_lists_its_code(folder, hub_recorder, capsys):
    assert main(["push", str(folder), "someone/x", "--dry-run"]) == 0
    out = capsys.readouterr().out
    listed = out.split("remote code (")[1].splitlines()[0]
    assert "modeling_ssa_llama.py" in listed and "scoring.py" in listed
