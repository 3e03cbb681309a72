"""What `push` publishes: only the installed package's remote code (a planted or changed *.py is refused, or
replaced with --refresh-code), every *.py named; never a link out of the folder unless asked (--follow-links),
and then named. The Hub's calls are recorded, never made."""

from __future__ import annotations

import json
import re
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


# every class reference a loader would import (auto_map in any config file, strings and lists; custom_pipelines):
# only a module of the folder that is byte-identical to the installed package's file may be named
def _set_auto_map(folder, file, key, value, field="auto_map"):
    path = folder / file
    content = json.loads(path.read_text()) if path.is_file() else {}
    content.setdefault(field, {})[key] = value
    path.write_text(json.dumps(content))


def _other_repo_tokenizer(folder, marker, tmp_path):
    _set_auto_map(folder, "tokenizer_config.json", "AutoTokenizer", ["evil/payload--tok.Evil", None])


def _other_repo_string(folder, marker, tmp_path):
    _set_auto_map(folder, "config.json", "AutoModel", "evil/payload--modeling_ssa_llama.SSALlamaModel")


def _list_value_in_config(folder, marker, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "planted.py").write_text(PLANTED_CODE.format(marker=str(marker)))
    _set_auto_map(folder, "config.json", "AutoModelForTokenClassification", [f"{tmp_path}/elsewhere/planted.Planted", None])


def _absolute_module(folder, marker, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "evil.py").write_text(PLANTED_CODE.format(marker=str(marker)))
    _set_auto_map(folder, "config.json", "AutoModel", f"{tmp_path}/elsewhere/evil.Evil")


def _processor_config(folder, marker, tmp_path):
    (folder / "processing_planted.py").write_text(PLANTED_CODE.format(marker=str(marker)))
    _set_auto_map(folder, "preprocessor_config.json", "AutoProcessor", "processing_planted.Planted")


def _processor_other_repo(folder, marker, tmp_path):
    _set_auto_map(folder, "processor_config.json", "AutoProcessor", "evil/payload--proc.Evil")


def _custom_pipeline(folder, marker, tmp_path):
    (folder / "pipe.py").write_text(PLANTED_CODE.format(marker=str(marker)))
    _set_auto_map(folder, "config.json", "planted-task", {"impl": "pipe.Planted", "pt": ["AutoModelForCausalLM"]},
                  field="custom_pipelines")


def _not_a_reference(folder, marker, tmp_path):
    _set_auto_map(folder, "tokenizer_config.json", "AutoTokenizer", {"module": "x"})


REFERENCES = {
    "tokenizer auto_map naming another repo (list)": (_other_repo_tokenizer,
                                                      r"tokenizer_config.json auto_map\['AutoTokenizer'\]\[0\].*another Hub repository"),
    "config auto_map naming another repo (string)": (_other_repo_string, r"config.json auto_map\['AutoModel'\].*another Hub"),
    "config auto_map list value": (_list_value_in_config,
                                   r"auto_map\['AutoModelForTokenClassification'\]\[0\] = .*not `module.Class`"),
    "absolute module path outside the folder": (_absolute_module, r"config.json auto_map\['AutoModel'\].*not `module.Class`"),
    "preprocessor_config auto_map": (_processor_config, r"preprocessor_config.json auto_map\['AutoProcessor'\].*not among"),
    "processor_config auto_map naming another repo": (_processor_other_repo, r"processor_config.json .*another Hub"),
    "custom_pipelines impl": (_custom_pipeline, r"custom_pipelines\['planted-task'\]\['impl'\].*not among"),
    "an auto_map value that is not a reference": (_not_a_reference, r"is dict .*not a class reference"),
}


@pytest.mark.parametrize("refresh", [False, True])
@pytest.mark.parametrize("plant", sorted(REFERENCES))
def test_push_refuses_every_reference_to_code_it_does_not_vouch_for(plant, refresh, folder, hub_recorder, marker,
                                                                    tmp_path, capsys):
    make, message = REFERENCES[plant]
    make(folder, marker, tmp_path)
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    argv = ["push", str(folder), "someone/x", "--dry-run", *(["--refresh-code"] if refresh else [])]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert re.search(message, err), err
    assert hub_recorder == [] and not marker.exists()
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()} == before  # --refresh-code wrote nothing


def test_a_reference_to_a_changed_module_is_refused_and_refresh_code_mends_it(folder, hub_recorder, marker):
    config = json.loads((folder / "config.json").read_text())
    module = sorted(config["auto_map"].values())[0].split(".")[0]
    (folder / f"{module}.py").write_text(PLANTED_CODE.format(marker=str(marker)))
    with pytest.raises(ValueError, match="differ from the installed"):
        push_to_hub(folder, "someone/x", dry_run=True)
    result = push_to_hub(folder, "someone/x", refresh_code=True, validate_online=False)
    assert f"{module}.py" in result.refreshed_code and not marker.exists() and hub_recorder
    assert (folder / f"{module}.py").read_bytes() == (installed_code_dir() / f"{module}.py").read_bytes()


def test_the_other_repos_code_would_run_if_pushed(folder, marker, tmp_path, monkeypatch):
    """Why the reference check matters, shown offline: transformers follows `repo--module.Class` out of the
    loaded folder into the named repository (a local folder of that name stands in for the Hub one) and imports
    its module: the code of a repository the pushed one merely names runs."""
    import sys

    from transformers import dynamic_module_utils
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    monkeypatch.setattr(dynamic_module_utils, "HF_MODULES_CACHE", str(tmp_path / "modules"))  # (not the user's)
    monkeypatch.setattr(sys, "path", list(sys.path))
    stand_in = tmp_path / "evil" / "payload"
    stand_in.mkdir(parents=True)
    (stand_in / "tok.py").write_text(PLANTED_CODE.format(marker=str(marker)) + "\nclass Evil:\n    pass\n")
    monkeypatch.chdir(tmp_path)
    get_class_from_dynamic_module("evil/payload--tok.Evil", str(folder))
    assert marker.exists(), "transformers did not import the other repository's module"
