"""ssa_hf.hub.publish: pushing a checkpoint folder and its card (the Hub's calls are recorded, never made)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from huggingface_hub import ModelCard

from ssa_hf.cli import main as cli
from ssa_hf.hub import push_to_hub

from .helpers import SECRET, LM_EVAL_JSON


def test_push_uploads_folder_and_card(ssa_checkpoint, hub_recorder, capfd):
    evaluation = ssa_checkpoint / "eval.json"
    evaluation.write_text(json.dumps(LM_EVAL_JSON))
    rc = cli(["-v", "push", str(ssa_checkpoint), "someone/tiny-ssa", "--private", "--evaluation", str(evaluation),
              "--base-preset", "tiny_llama"])
    captured = capfd.readouterr()
    assert rc == 0, captured.err
    assert SECRET not in captured.out + captured.err
    names = [c[0] for c in hub_recorder]
    assert names == ["validate", "create_repo", "upload_folder"]
    assert hub_recorder[1][1] == "someone/tiny-ssa" and hub_recorder[1][2]["private"] is True
    kwargs, uploaded = hub_recorder[2][1], hub_recorder[2][2]
    assert kwargs["repo_id"] == "someone/tiny-ssa" and Path(kwargs["folder_path"]) == ssa_checkpoint
    assert {"config.json", "model.safetensors", "README.md", "modeling_ssa_llama.py", "scoring.py",
            "tokenizer.json"} <= set(uploaded)
    assert not any(n.startswith(("checkpoint-", ".")) for n in uploaded)
    card = ModelCard(uploaded["README.md"].decode())
    assert 'from_pretrained("someone/tiny-ssa"' in card.text
    assert card.data.ssa_hf["base_preset"] == "tiny_llama"
    assert {r.task_name for r in card.data.eval_results} == {"arc_easy", "boolq"}
    assert "## Conversion" in card.text  # the inputs of the first rendering (convert) are kept
    assert "uploaded" in captured.out and "someone/tiny-ssa" in captured.out


def test_push_error_never_shows_the_token(ssa_checkpoint, hub_recorder, monkeypatch, capfd):
    from huggingface_hub import HfApi

    def failing_upload(self, **kwargs):
        raise RuntimeError(f"401 Unauthorized for token {SECRET}")

    monkeypatch.setattr(HfApi, "upload_folder", failing_upload)
    rc = cli(["push", str(ssa_checkpoint), "someone/tiny-ssa", "--no-validate-online"])
    captured = capfd.readouterr()
    assert rc == 1 and "401 Unauthorized" in captured.err
    assert SECRET not in captured.out + captured.err


def test_push_dry_run_contacts_nothing(ssa_checkpoint, hub_recorder, capsys):
    result = push_to_hub(ssa_checkpoint, "someone/tiny-ssa", dry_run=True, refresh_card=True)
    assert hub_recorder == []
    assert result.dry_run and result.card_rendered and "README.md" in result.files
    assert "checkpoint-10/optimizer.pt" not in result.files


def test_push_refusals(sources, ssa_checkpoint, hub_recorder, monkeypatch):
    import huggingface_hub
    from huggingface_hub import constants

    with pytest.raises(ValueError, match="not an ssa-hf model.*ssa-hf convert"):
        push_to_hub(sources["llama"][0], "someone/x")
    with pytest.raises(ValueError, match="not a Hub repository id"):
        push_to_hub(ssa_checkpoint, "bad id with spaces")
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    with pytest.raises(ValueError, match="no Hugging Face token"):
        push_to_hub(ssa_checkpoint, "someone/x")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ValueError, match="HF_HUB_OFFLINE"):
        push_to_hub(ssa_checkpoint, "someone/x")
    (ssa_checkpoint / "scoring.py").unlink()
    with pytest.raises(ValueError, match="lacks scoring.py"):
        push_to_hub(ssa_checkpoint, "someone/x", dry_run=True)
    assert hub_recorder == []


class _HubHTTPError(Exception):
    def __init__(self, status: int, text: str):
        super().__init__(text)
        self.response = type("Response", (), {"status_code": status})()


class ConnectError(Exception):  # named as httpx's
    pass


@pytest.mark.parametrize(
    "failure, expected",
    [
        (_HubHTTPError(403, f"403 Forbidden: you cannot write to someone (token {SECRET})"),
         r"HTTP 403: 403 Forbidden.*\*\*\*.*write access to someone"),
        (_HubHTTPError(401, "401 Unauthorized"), r"HTTP 401.*hf auth login"),
        (ConnectError("[Errno -3] Temporary failure in name resolution"), "could not reach the Hub"),
        ("card", r"rejected the model card.*--no-validate-online"),
    ],
)
def test_a_failed_push_says_what_to_do_and_changes_nothing(ssa_checkpoint, hub_recorder, monkeypatch, capfd,
                                                           failure, expected):
    """--refresh-card renders README.md anew, but a push that fails puts the folder back as it was."""
    from huggingface_hub import HfApi
    from huggingface_hub.repocard import RepoCard

    def fail(*args, **kwargs):
        raise ValueError("metadata: 'license' is not valid") if failure == "card" else failure

    monkeypatch.setattr(*((RepoCard, "validate", fail) if failure == "card" else (HfApi, "upload_folder", fail)))
    before = {name: (ssa_checkpoint / name).read_bytes() for name in ("README.md", "ssa_hf_card.json")}
    rc = cli(["push", str(ssa_checkpoint), "someone/tiny-ssa", "--refresh-card", "--license", "mit"])
    err = capfd.readouterr().err
    assert rc == 1 and SECRET not in err
    assert re.search(expected, err) and "The local folder is unchanged" in err, err
    assert {name: (ssa_checkpoint / name).read_bytes() for name in before} == before


def test_a_push_refused_before_the_hub_changes_nothing(ssa_checkpoint, hub_recorder, monkeypatch, capfd):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    monkeypatch.delenv("HF_TOKEN")
    readme = (ssa_checkpoint / "README.md").read_bytes()
    assert cli(["push", str(ssa_checkpoint), "someone/tiny-ssa", "--refresh-card"]) == 2
    assert "no Hugging Face token" in capfd.readouterr().err
    assert (ssa_checkpoint / "README.md").read_bytes() == readme and hub_recorder == []


@pytest.mark.parametrize("stored", [{"template": "evil_template.md"}, {"training": "/etc/hostname"},
                                    {"evaluation": "/etc/hostname"}, {"unknown": 1}],
                         ids=["template", "training-path", "evaluation-path", "unknown-key"])
def test_stored_card_inputs_are_data_only(stored, ssa_checkpoint, hub_recorder):
    """ssa_hf_card.json comes with the (untrusted) folder: a template there would be rendered by unsandboxed Jinja,
    a path would be read and published; both are refused before anything is rendered."""
    (ssa_checkpoint / "evil_template.md").write_text("{{ cycler.__init__.__globals__.os.system('touch pwned') }}")
    (ssa_checkpoint / "ssa_hf_card.json").write_text(json.dumps(stored))
    before = (ssa_checkpoint / "README.md").read_bytes()
    with pytest.raises(ValueError, match="not stored card inputs"):
        push_to_hub(ssa_checkpoint, "someone/x", dry_run=True, refresh_card=True)
    assert (ssa_checkpoint / "README.md").read_bytes() == before and not Path("pwned").exists()
    assert hub_recorder == []


def test_a_link_to_a_file_push_leaves_out_is_refused(ssa_checkpoint, hub_recorder):
    (ssa_checkpoint / ".env").write_text(f"HF_TOKEN={SECRET}")
    (ssa_checkpoint / "generation_notes.txt").symlink_to(".env")
    with pytest.raises(ValueError, match="generation_notes.txt is a link to .env, which push leaves out"):
        push_to_hub(ssa_checkpoint, "someone/x", dry_run=True)
    (ssa_checkpoint / "notes_copy.txt").symlink_to("config.json")  # a link to a file that is published anyway
    (ssa_checkpoint / "generation_notes.txt").unlink()
    assert "notes_copy.txt" in push_to_hub(ssa_checkpoint, "someone/x", dry_run=True).files


def test_a_folder_given_with_a_tilde_is_checked_where_it_is_uploaded_from(ssa_checkpoint, hub_recorder, monkeypatch,
                                                                          tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    ssa_checkpoint.rename(home / "model")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "~" / "model").mkdir(parents=True)  # a folder literally named "~/model" here: not what is pushed
    result = push_to_hub("~/model", "someone/x", dry_run=True)
    assert Path(result.folder) == (home / "model").resolve() and "model.safetensors" in result.files
