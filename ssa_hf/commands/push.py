"""`ssa-hf push`: upload a checkpoint folder with its model card to the Hugging Face Hub."""

import os
import sys


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

    card_kwargs = {k: v for k, v in {
        "training": args.training, "evaluation": args.evaluation, "base_preset": args.base_preset,
        "base_model": args.base_model, "license": args.license, "language": args.language,
    }.items() if v is not None}
    try:
        result = push_to_hub(
            args.dir, args.repo_id, private=args.private, revision=args.revision, create_pr=args.create_pr,
            commit_message=args.commit_message, refresh_card=args.refresh_card, dry_run=args.dry_run,
            validate_online=not args.no_validate_online, **card_kwargs,
        )
    except (ValueError, FileNotFoundError, FileExistsError):
        raise  # ssa-hf's own messages, printed by the CLI
    except PushError as error:  # the Hub's or the network's refusal, with what to do; never with the token
        print(f"ssa-hf push: error: {_redact(str(error), _secrets(args))}", file=sys.stderr)
        return 1
    except Exception as error:  # anything else: never let a token reach the terminal either
        print(f"ssa-hf push: error: {type(error).__name__}: {_redact(str(error), _secrets(args))}", file=sys.stderr)
        return 1
    if result.card_rendered:
        print(f"rendered the model card: {result.folder}/README.md")
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
    parser = subparsers.add_parser(
        "push", help="upload a checkpoint folder with its model card to the Hugging Face Hub",
        description="Check DIR (an ssa-hf checkpoint with its remote code), render its model card if it has none "
                    "(or with --refresh-card / card options), and upload it to REPO_ID (created if needed). The "
                    "token comes from `hf auth login` or HF_TOKEN and is never printed.")
    parser.add_argument("dir", help="checkpoint folder written by save_pretrained / ssa-hf")
    parser.add_argument("repo_id", help="Hub repository, namespace/name")
    parser.add_argument("--private", action="store_true", help="create the repository as private")
    parser.add_argument("--revision", help="branch to push to")
    parser.add_argument("--create-pr", action="store_true", help="open a pull request instead of committing")
    parser.add_argument("--commit-message", help="commit message")
    parser.add_argument("--dry-run", action="store_true",
                        help="check the folder and render the card, list what would be uploaded, contact nothing")
    parser.add_argument("--refresh-card", action="store_true", help="render README.md again (with the repo id)")
    parser.add_argument("--training", metavar="FILE", help="JSON/YAML with training information for the card")
    parser.add_argument("--evaluation", metavar="FILE",
                        help="JSON/YAML with evaluation results (ssa-hf list or lm-eval's results JSON)")
    parser.add_argument("--base-preset", help="ssa-hf preset the model was built from")
    parser.add_argument("--base-model", help="Hub id of the model it was fine-tuned or converted from")
    parser.add_argument("--license", help="license id, e.g. apache-2.0")
    parser.add_argument("--language", help="language code, e.g. en")
    parser.add_argument("--no-validate-online", action="store_true",
                        help="skip the Hub's card validation request before uploading")
    parser.set_defaults(func=run)
