"""`ssa-hf push`: upload a checkpoint folder with its model card to the Hugging Face Hub."""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass, field

from . import add_command, config_from_args

SUMMARY = "upload a checkpoint folder with its model card to the Hugging Face Hub"
DESCRIPTION = ("Check DIR (an ssa-hf checkpoint with its remote code), render its model card if it has none "
               "(or with --refresh-card / card options), and upload it to REPO_ID (created if needed). The "
               "token comes from `hf auth login` or HF_TOKEN and is never printed.")


@dataclass
class PushOptions:
    """The options of `ssa-hf push` (arguments of `ssa_hf.hub.push_to_hub`).

    private: create the repository as private.
    revision: branch to push to.
    create_pr: open a pull request instead of committing.
    commit_message: commit message.
    dry_run: check the folder and render the card, list what would be uploaded, contact nothing.
    refresh_card: render README.md again (with the repo id).
    refresh_code: replace the folder's remote-code *.py by the installed ssa-hf's (a push refuses files that differ).
    follow_links: upload the content of links that lead out of the folder (named first; refused without it).
    training: JSON/YAML file with training information for the card.
    evaluation: JSON/YAML file with evaluation results (ssa-hf list or lm-eval's results JSON).
    base_preset: ssa-hf preset the model was built from.
    base_model: Hub id of the model it was fine-tuned or converted from.
    license: license id, e.g. apache-2.0.
    language: language code, e.g. en.
    validate_online: let the Hub validate the card before uploading (--no-validate-online skips the request).
    """

    private: bool = False
    revision: str | None = None
    create_pr: bool = False
    commit_message: str | None = None
    dry_run: bool = False
    refresh_card: bool = False
    refresh_code: bool = False
    follow_links: bool = False
    training: str | None = field(default=None, metadata={"metavar": "FILE"})
    evaluation: str | None = field(default=None, metadata={"metavar": "FILE"})
    base_preset: str | None = None
    base_model: str | None = None
    license: str | None = None
    language: str | None = None
    validate_online: bool = True


def _secrets(args) -> list[str]:
    from huggingface_hub import get_token

    found = [os.environ.get("HF_TOKEN"), os.environ.get("HUGGING_FACE_HUB_TOKEN")]
    try:
        found.append(get_token())
    except Exception:  # a broken token store must not hide the real error
        pass
    return [s for s in found if s]


def _redact(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def run(args) -> int:
    from ..hub import PushError, push_to_hub

    options = config_from_args(PushOptions, args)
    try:
        result = push_to_hub(args.dir, args.repo_id, **dataclasses.asdict(options))
    except (ValueError, FileNotFoundError, FileExistsError):
        raise  # ssa-hf's own messages, printed by the CLI
    except PushError as error:  # the Hub's or the network's refusal, with what to do; never with the token
        print(f"ssa-hf push: error: {_redact(str(error), _secrets(args))}", file=sys.stderr)
        return 1
    except Exception as error:  # anything else: never let a token reach the terminal either
        print(f"ssa-hf push: error: {type(error).__name__}: {_redact(str(error), _secrets(args))}", file=sys.stderr)
        return 1
    from .. import __version__

    would = "would be " if result.dry_run else ""  # a dry run puts the folder back as it was
    if result.card_rendered:
        print(f"{'would render' if result.dry_run else 'rendered'} the model card: {result.folder}/README.md")
    if result.refreshed_code:
        print(f"{would}replaced by the installed ssa-hf {__version__}'s files: {', '.join(result.refreshed_code)}")
    for link in result.linked:
        print(f"uploading the content of a link out of the folder (--follow-links): {link}")
    print(f"remote code ({len(result.code_files)} *.py, identical to the installed ssa-hf {__version__}'s): "
          + (", ".join(result.code_files) or "none"))
    if result.dry_run:
        print(f"dry run: would upload {len(result.files)} files to {result.repo_id}:")
        for name in result.files:
            print(f"  {name}")
        return 0
    print(f"uploaded {len(result.files)} files to {result.url}")
    if result.commit_url:
        print(f"commit: {result.commit_url}")
    return 0


def register(subparsers) -> None:
    add_command(subparsers, "push", run, SUMMARY, DESCRIPTION, config=PushOptions, config_file=False,
                positionals={"dir": "checkpoint folder written by save_pretrained / ssa-hf",
                             "repo_id": "Hub repository, namespace/name"})
