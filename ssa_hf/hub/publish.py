"""Hub-ready checkpoint folders and pushing them: `save_checkpoint_folder(model, folder, tokenizer=...)` writes
model (safetensors + remote code), tokenizer and card into a temporary sibling folder and renames it into place
(readers never see half a checkpoint); `check_checkpoint_folder` checks that a folder loads with remote code
alone; `push_to_hub(folder, repo_id)` checks the folder, renders the card if needed and uploads it through
`huggingface_hub.HfApi` (token from `hf auth login` or HF_TOKEN; never printed)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping, Sequence

from ..models.families import FAMILIES
from ..options import yaml_error_line
from ..regular_files import check_model_folder
from ..reporting import atomic_folder, atomic_write_bytes, links_leaving
from .cards import CARD_INPUTS_FILE, REPO_ID_PLACEHOLDER, validate_model_card, write_model_card
from .folders import check_weight_files, family_spec, read_config_json, weight_files

logger = logging.getLogger("ssa_hf.hub")

# Never uploaded by `push_to_hub`: training state, intermediate checkpoints, temporary and hidden files.
DEFAULT_IGNORE_PATTERNS = (
    ".*", "*/.*", "**/.*", "*.tmp", "__pycache__/*", "**/__pycache__/*", "checkpoint-*", "checkpoint-*/*",
    "checkpoints/*", "optimizer.pt", "scheduler.pt", "rng_state*.pth", "training_state/*", "*.pyc",
)


def save_checkpoint_folder(model, folder: str | os.PathLike, tokenizer=None, *, overwrite: bool = False,
                           card: bool = True, extra_files: Mapping[str, bytes | str] | None = None,
                           **card_kwargs) -> Path:
    """Write a Hub-ready checkpoint folder atomically: the model through `save_pretrained` (safetensors, config,
    the remote-code files), the tokenizer, extra files (name -> content) and the model card (README.md)."""
    family_spec(model.config)  # refuses a model that is not of an ssa-hf family
    destination = Path(folder)
    with atomic_folder(destination, overwrite=overwrite) as tmp:
        model.save_pretrained(tmp)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        for name, content in (extra_files or {}).items():
            atomic_write_bytes(tmp / name, content.encode("utf-8") if isinstance(content, str) else content)
        if card:
            write_model_card(tmp, default_name=destination.resolve().name, **card_kwargs)
    return destination.resolve()



@dataclass
class PushResult:
    repo_id: str
    folder: str
    files: list[str]
    card_rendered: bool
    dry_run: bool
    url: str | None = None
    commit_url: str | None = None
    code_files: list[str] = field(default_factory=list)  # the *.py uploaded (identical to the installed ones)
    refreshed_code: list[str] = field(default_factory=list)  # replaced by the installed files (refresh_code)
    linked: list[str] = field(default_factory=list)  # "name -> target" of links whose content is uploaded


def _relative_imports(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    return set(re.findall(r"^\s*from\s+\.(\w+)\s+import", text, flags=re.M)) | set(
        re.findall(r"^\s*import\s+\.(\w+)", text, flags=re.M))


def check_checkpoint_folder(folder: str | os.PathLike) -> dict:
    """Check that a folder is a loadable ssa-hf checkpoint: config.json of an ssa-hf model, weights, and the
    remote-code files named by auto_map with every sibling file they import. Returns config.json's content."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"checkpoint folder {str(folder)!r} does not exist")
    raw = read_config_json(folder)
    if raw.get("model_type") not in FAMILIES:
        raise ValueError(f"{folder}: model_type {raw.get('model_type')!r} is not an ssa-hf model; "
                         f"convert it first with `ssa-hf convert {folder} DST`")
    if not weight_files(folder) and not list(folder.glob("pytorch_model*.bin")):
        raise ValueError(f"{folder} has no weights (*.safetensors); save the model with save_pretrained")
    auto_map = raw.get("auto_map")
    if not auto_map:
        raise ValueError(f"{folder}/config.json has no auto_map, so trust_remote_code cannot load it without "
                         f"ssa-hf; save it again after `import ssa_hf` (which registers the classes)")
    todo = {ref.split(".")[0] for ref in auto_map.values() if isinstance(ref, str)}
    seen: set[str] = set()
    while todo:
        module = todo.pop()
        seen.add(module)
        path = folder / f"{module}.py"
        if not path.is_file():
            raise ValueError(f"{folder} lacks {module}.py, needed by the remote code (auto_map); save the model "
                             f"again with save_pretrained after `import ssa_hf`")
        todo |= _relative_imports(path) - seen
    return raw


# JSON files whose `auto_map` (config.json also `custom_pipelines`) makes transformers import code when the pushed
# repository is loaded with trust_remote_code=True; every *.json of the folder is read for them, these included
_MODULE_REFERENCE = re.compile(r"([A-Za-z_]\w*)\.([A-Za-z_]\w*)")


@dataclass(frozen=True)
class CodeReference:
    """One class reference a loader would import: where it is written (file and key) and its text."""

    where: str  # e.g. "tokenizer_config.json auto_map['AutoTokenizer'][0]"
    value: object
    base: str = ""  # the folder (relative) of the JSON file: where a loader looks for the module

    @property
    def module(self) -> str | None:
        match = _MODULE_REFERENCE.fullmatch(self.value) if isinstance(self.value, str) else None
        return match.group(1) if match else None


def code_references(folder: Path, files: Sequence[str] | None = None) -> list[CodeReference]:
    """Every class reference in the folder's JSON files that makes transformers import code: each `auto_map`
    entry (a string, or each item of a list such as the tokenizer's [slow, fast]; None items skipped) and each
    `custom_pipelines` implementation, in every *.json of the folder (config, tokenizer, processor and
    preprocessor configs; sub-folders too), or of those among `files` (what is uploaded). Values of any other
    type are kept, to be refused."""
    found = []
    for path in sorted(folder.rglob("*.json")):
        relative = path.relative_to(folder).as_posix()
        if not path.is_file() or (files is not None and relative not in files):
            continue
        try:
            content = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            continue  # (not a config: a data file, or a damaged file the upload checks name)
        if not isinstance(content, dict):
            continue
        name, base = relative, path.parent.relative_to(folder).as_posix()
        base = "" if base == "." else base + "/"
        start = len(found)
        auto_map = content.get("auto_map")
        if auto_map is not None and not isinstance(auto_map, dict):
            found.append(CodeReference(f"{name} auto_map", auto_map))
        for key, value in (auto_map or {}).items() if isinstance(auto_map, dict) else []:
            if isinstance(value, list):
                found += [CodeReference(f"{name} auto_map[{key!r}][{i}]", item)
                          for i, item in enumerate(value) if item is not None]
            elif value is not None:
                found.append(CodeReference(f"{name} auto_map[{key!r}]", value))
        pipelines = content.get("custom_pipelines")  # {task: {"impl": "module.Class", ...}}
        if pipelines is not None and not isinstance(pipelines, dict):
            found.append(CodeReference(f"{name} custom_pipelines", pipelines))
        for task, spec in (pipelines or {}).items() if isinstance(pipelines, dict) else []:
            found.append(CodeReference(f"{name} custom_pipelines[{task!r}]['impl']", spec.get("impl"))
                         if isinstance(spec, dict) else CodeReference(f"{name} custom_pipelines[{task!r}]", spec))
        found[start:] = [CodeReference(r.where, r.value, base) for r in found[start:]]
    return found


def refuse_foreign_references(folder: Path, references: Sequence[CodeReference],
                              files: Sequence[str] | None = None) -> None:
    """Every reference must name, as `module.Class`, a module of the installed package's remote code; with
    `files` (what would be uploaded), the folder's `module.py` must be among them, a regular file, and
    byte-identical to the installed file. Anything else - another Hub repository's code (`repo--module.Class`),
    a path, a module ssa-hf does not have, a changed file - is refused, naming the entry."""
    from .. import __version__

    installed = installed_code_dir()
    for reference in references:
        value, module = reference.value, reference.module
        problem = None
        if not isinstance(value, str):
            problem = f"is {type(value).__name__} {value!r}, not a class reference `module.Class`"
        elif "--" in value:
            problem = (f"names code in another Hub repository ({value.split('--')[0]!r}), which everyone loading the "
                       "pushed repository with trust_remote_code=True would download and run")
        elif module is None:
            problem = "is not `module.Class` naming a module inside the folder (a path, or a package)"
        elif not (installed / f"{module}.py").is_file():
            problem = f"names {module}.py, which is not among the installed ssa-hf {__version__}'s remote-code files"
        elif files is not None:
            name = f"{reference.base}{module}.py"
            path = folder / name
            if name not in files or path.is_symlink() or not path.is_file():
                problem = f"names {name}, which the folder does not upload as a file of its own"
            elif path.read_bytes() != (installed / f"{module}.py").read_bytes():
                problem = (f"names {module}.py, which differs from the installed ssa-hf {__version__}'s (pass "
                           "--refresh-code to replace it by the installed file)")
        if problem:
            raise ValueError(
                f"{folder}: {reference.where} = {value!r} {problem}. Pushing would publish code ssa-hf does not vouch "
                "for; remove or correct that entry (ssa-hf folders name only its own modules)")


def _remote_code_modules(folder: Path, raw: dict, code_dir: Path) -> set[str]:
    """The modules the folder's class references name (`code_references`; only well-formed `module.Class`
    ones), with every sibling they import, followed through the files of `code_dir`."""
    todo = {reference.module for reference in code_references(folder) if reference.module}
    seen: set[str] = set()
    while todo:
        module = todo.pop()
        seen.add(module)
        if (code_dir / f"{module}.py").is_file():
            todo |= _relative_imports(code_dir / f"{module}.py") - seen
    return seen


def installed_code_dir() -> Path:
    """The installed package's remote-code unit (ssa_hf/models): what a pushed folder's *.py must be."""
    from .. import models

    return Path(models.__file__).parent


def refresh_remote_code(folder: str | os.PathLike) -> list[str]:
    """Write the installed package's remote-code files (every module auto_map names, with its siblings) into
    `folder` where they are missing or differ; returns the names written."""
    folder = Path(folder)
    installed = installed_code_dir()
    written = []
    for module in sorted(_remote_code_modules(folder, read_config_json(folder), installed)):
        source = installed / f"{module}.py"
        target = folder / f"{module}.py"
        if source.is_file() and (target.is_symlink() or not target.is_file() or target.read_bytes() != source.read_bytes()):
            target.unlink(missing_ok=True)  # (a link is replaced, never written through)
            atomic_write_bytes(target, source.read_bytes())
            written.append(target.name)
    return written


def check_remote_code(folder: Path, files: Sequence[str]) -> list[str]:
    """The *.py among `files`, each byte-identical to the installed package's file of that name; a file the
    package does not have, or one that differs, is refused (it would reach everyone who loads the pushed
    repository with trust_remote_code=True); so is every class reference of the uploaded JSON files that does not
    name such a file (`refuse_foreign_references`)."""
    from .. import __version__

    installed = installed_code_dir()
    code = [name for name in files if name.endswith(".py")]
    foreign = [name for name in code if "/" in name or not (installed / name).is_file()]
    if foreign:
        raise ValueError(
            f"{folder}: {', '.join(foreign)} {'is' if len(foreign) == 1 else 'are'} not among the installed ssa-hf "
            f"{__version__}'s remote-code files: pushing would publish code ssa-hf does not vouch for, run by everyone "
            "who loads the repository with trust_remote_code=True. Remove it from the folder (or add it to "
            "ignore_patterns)")
    differ = [name for name in code if (folder / name).read_bytes() != (installed / name).read_bytes()]
    if differ:
        raise ValueError(
            f"{folder}: the remote-code file(s) {', '.join(differ)} differ from the installed ssa-hf {__version__}'s: "
            "pushing them would publish code ssa-hf does not vouch for. Pass --refresh-code (refresh_code=True) to "
            "replace them by the installed files, or save the folder again with this ssa-hf")
    refuse_foreign_references(folder, code_references(folder, files), files)  # (what loaders would import)
    return code


def _links_out(folder: Path, files: Sequence[str], follow_links: bool) -> list[str]:
    """Links among the files to upload (and linked folders) that lead out of `folder`: refused, or with
    `follow_links` (files only) named as "name -> target" and uploaded with the target's content."""
    found = []
    for link, target in links_leaving(folder):
        name = link.relative_to(folder.resolve()).as_posix()
        if link.is_dir():
            raise ValueError(f"{folder}: {name} is a link to the folder {target}, outside the folder to push; copy "
                             "that folder in (or remove the link)")
        if name in files:
            found.append(f"{name} -> {target}")
    root = folder.resolve()
    for name in files:  # a link to a file inside that push leaves out (.env) would upload it under this name
        target = Path(os.path.realpath(folder / name))
        if (folder / name).is_symlink() and target.is_relative_to(root) and target.relative_to(root).as_posix() not in files:
            raise ValueError(f"{folder}: {name} is a link to {target.relative_to(root).as_posix()}, which push leaves "
                             f"out (hidden, or matched by the ignore patterns); pushing would upload it under the "
                             f"link's name. Replace the link by a copy of what should be published, or remove it")
    if found and not follow_links:
        raise ValueError(
            f"{folder}: {', '.join(found)}: link(s) leading out of the folder; pushing would upload what they point "
            "at (a link to a credentials file would be published). Replace each link by a copy, remove it, or pass "
            "--follow-links (follow_links=True) to upload the targets' content")
    return found


def _files_to_upload(folder: Path, ignore_patterns: Sequence[str]) -> list[str]:
    from huggingface_hub.utils import filter_repo_objects

    files = [p.relative_to(folder).as_posix() for p in sorted(folder.rglob("*")) if p.is_file()]
    return list(filter_repo_objects(files, ignore_patterns=list(ignore_patterns)))


class PushError(RuntimeError):
    """A push that the Hub (or the network) refused; the message says what happened and what to do."""


# HTTP status -> what to do about it
_PUSH_ADVICE = {
    401: "the Hub did not accept the token: run `hf auth login` again, or set HF_TOKEN to a valid token",
    403: "the token may not write there: use a token with write access to {namespace}, or a namespace you own",
    404: "the Hub found no {target}: check the repository id{branch_hint}",
    409: "the Hub reported a conflict (another commit or a repository of another type at {repo_id}): retry, or "
         "push to another repository",
    413: "the Hub refused the upload's size: large weights need Git LFS / Xet support (`pip install -U "
         "huggingface_hub`)",
    429: "the Hub is rate-limiting this account: wait a few minutes and run the command again",
}
_NETWORK_ERRORS = {"ConnectionError", "TransportError", "TimeoutException", "Timeout", "ConnectError"}


def explain_push_failure(error: BaseException, repo_id: str, revision: str | None = None) -> str:
    """A message for a failed push: the Hub's own words (first line) and what to do about them."""
    status = getattr(getattr(error, "response", None), "status_code", None)
    detail = (str(error).strip().splitlines() or [""])[0]
    if status in _PUSH_ADVICE:
        advice = _PUSH_ADVICE[status].format(
            namespace=repo_id.split("/")[0] if "/" in repo_id else "your account", repo_id=repo_id,
            target=f"branch {revision!r} in {repo_id}" if revision else f"repository {repo_id}",
            branch_hint=" and create the branch first (or drop --revision)" if revision else "")
    elif {c.__name__ for c in type(error).__mro__} & _NETWORK_ERRORS:
        advice = "could not reach the Hub: check the network connection (and HF_ENDPOINT, if set), then run again"
    else:
        advice = "see the Hub's message; run the command again with -v for details"
    status_text = f", HTTP {status}" if status else ""
    return (f"pushing to {repo_id} failed ({type(error).__name__}{status_text}: {detail}). {advice}. "
            f"The local folder is unchanged.")


@contextlib.contextmanager
def _restored_on_failure(paths: Sequence[Path], always: bool = False) -> Iterator[None]:
    """Put the files back as they were (or absent) if the block does not finish; with `always` (a dry run, which
    changes nothing) also when it does."""
    saved = {path: (path.read_bytes(), path.stat()) if path.is_file() else None for path in paths}

    def restore():
        for path, kept in saved.items():
            if kept is None:
                path.unlink(missing_ok=True)
            elif not path.is_file() or path.read_bytes() != kept[0]:
                atomic_write_bytes(path, kept[0])
                os.utime(path, ns=(kept[1].st_atime_ns, kept[1].st_mtime_ns))

    try:
        yield
    except BaseException:
        restore()
        raise
    if always:
        restore()


# what ssa_hf_card.json may hold, and of which types: the folder is untrusted, so its stored inputs are data only
# (never a template, which huggingface_hub renders with unsandboxed Jinja, nor a path to read training or
# evaluation records from)
STORED_CARD_INPUTS = {"training": dict, "evaluation": list, "base_preset": str, "base_model": (str, list),
                      "license": str, "language": (str, list), "model_name": str, "repo_id": str, "conversion": dict}


def _stored_card_inputs(folder: Path) -> dict:
    path = folder / CARD_INPUTS_FILE
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise ValueError(f"{path}: not a JSON file of card inputs ({error}); delete it or pass the card inputs") from None
    if not isinstance(stored, dict):
        raise ValueError(f"{path}: expected a JSON object of card inputs; delete it or pass the card inputs")
    bad = sorted(k for k, v in stored.items() if k not in STORED_CARD_INPUTS
                 or (v is not None and not isinstance(v, STORED_CARD_INPUTS[k])))
    if bad:
        raise ValueError(f"{path}: keys {bad} are not stored card inputs (known: {sorted(STORED_CARD_INPUTS)}, "
                         f"training a mapping, evaluation a list); "
                         f"ssa-hf never writes them (a template or a file path is never taken from a model folder): "
                         f"delete the file or those keys")
    return stored


def _card_for_push(folder: Path, repo_id: str, refresh_card: bool, card_kwargs: dict):
    """(the card, whether it was rendered anew): rendered and written when the folder has none, with refresh_card
    or with card inputs; else the folder's card, checked offline."""
    import yaml
    from huggingface_hub import ModelCard

    readme = folder / "README.md"
    if refresh_card or card_kwargs or not readme.is_file():
        previous = _stored_card_inputs(folder) if (folder / CARD_INPUTS_FILE).is_file() else {}
        return write_model_card(folder, **{**previous, **card_kwargs, "repo_id": repo_id}), True
    try:
        card = ModelCard.load(readme)
    except (UnicodeDecodeError, ValueError, yaml.YAMLError) as error:  # (its YAML header's error spans lines)
        raise ValueError(f"{readme}: not a readable model card ({yaml_error_line(error)}); fix it, or render it again "
                         f"with --refresh-card") from None
    validate_model_card(card)
    if REPO_ID_PLACEHOLDER in str(card):
        logger.warning("README.md shows %r in its code snippets; pass refresh_card=True (--refresh-card) to "
                       "render it with the repo id", REPO_ID_PLACEHOLDER)
    return card, False


def _validate_card_online(card, repo_id: str, revision: str | None) -> None:
    try:
        card.validate()
    except ValueError as error:
        raise PushError(f"the Hub rejected the model card (README.md): {error}. Fix its metadata (or render it "
                        f"again with --refresh-card), or skip this check with --no-validate-online. The local "
                        f"folder is unchanged.") from error
    except Exception as error:
        raise PushError(explain_push_failure(error, repo_id, revision)) from error


def push_to_hub(
    folder: str | os.PathLike,
    repo_id: str,
    *,
    private: bool = False,
    token: str | None = None,
    revision: str | None = None,
    create_pr: bool = False,
    commit_message: str | None = None,
    refresh_card: bool = False,
    validate_online: bool = True,
    dry_run: bool = False,
    refresh_code: bool = False,
    follow_links: bool = False,
    ignore_patterns: Sequence[str] = DEFAULT_IGNORE_PATTERNS,
    **card_kwargs,
) -> PushResult:
    """Upload a checkpoint folder with its model card to the Hub repository `repo_id` (created if needed).

    The folder is checked first (`check_checkpoint_folder`). The card (README.md) is rendered when the folder has
    none, when `refresh_card` is set, or when card inputs (training=, evaluation=, base_preset=, ...) are given;
    it reuses the inputs of the previous rendering (ssa_hf_card.json) and adds the repo id. An existing card is
    checked offline; before uploading, the Hub validates it (`ModelCard.validate`, skipped with
    validate_online=False). The token comes from `token`, else HF_TOKEN or the stored login; it is never printed.
    `dry_run` does everything except contacting the Hub and returns the files that would be uploaded.
    Only code the installed package vouches for is published: every *.py uploaded must be byte-identical to the
    installed ssa-hf's file of that name (`refresh_code` first writes the installed files into the folder).
    A link leading out of the folder is refused (`follow_links`: its target's content is uploaded, and named).
    A push that fails leaves the folder as it was (a card rendered for it is taken back) and raises `PushError`
    (Hub and network failures, with what to do) or ValueError (refused before contacting the Hub).
    """
    from huggingface_hub import HfApi, constants, get_token

    # one absolute path for the checks and the upload (huggingface_hub expands "~" in what it is given)
    folder = Path(os.path.abspath(Path(folder).expanduser()))
    if not re.fullmatch(r"[\w.\-]+/[\w.\-]+|[\w.\-]+", repo_id or ""):
        raise ValueError(f"repo_id {repo_id!r} is not a Hub repository id (namespace/name)")
    if not folder.is_dir():
        raise FileNotFoundError(f"checkpoint folder {str(folder)!r} "
                                f"{'is a file, not a folder' if folder.exists() else 'does not exist'}")
    card_kwargs = {k: v for k, v in card_kwargs.items() if v is not None}
    check_model_folder(folder)  # (a FIFO, a JSON list, sizes < 1: one line, before anything reads them)
    check_weight_files(folder)  # (a damaged safetensors file: one line naming it, not the push's catch-all)
    refuse_foreign_references(folder, code_references(folder, _files_to_upload(folder, ignore_patterns)))  # (first)
    code = [folder / f"{m}.py" for m in _remote_code_modules(folder, read_config_json(folder), installed_code_dir())]
    with _restored_on_failure([folder / "README.md", folder / CARD_INPUTS_FILE] + (code if refresh_code else []),
                              always=dry_run):
        refreshed = refresh_remote_code(folder) if refresh_code else []
        check_checkpoint_folder(folder)
        files = _files_to_upload(folder, ignore_patterns)
        linked = _links_out(folder, files, follow_links)
        code_files = check_remote_code(folder, files)
        card, rendered = _card_for_push(folder, repo_id, refresh_card, card_kwargs)
        files = _files_to_upload(folder, ignore_patterns)  # (with the card, if it was rendered)
        result = PushResult(repo_id=repo_id, folder=str(folder.resolve()), files=files, card_rendered=rendered,
                            dry_run=dry_run, code_files=code_files, refreshed_code=refreshed, linked=linked)
        if dry_run:
            return result
        if constants.HF_HUB_OFFLINE:
            raise ValueError("HF_HUB_OFFLINE is set: pushing needs the network; unset it, or use a dry run")
        if token is None and get_token() is None:
            raise ValueError("no Hugging Face token: run `hf auth login` or set the HF_TOKEN environment variable")
        if validate_online:
            _validate_card_online(card, repo_id, revision)
        try:
            api = HfApi(token=token)
            repo_url = api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
            commit = api.upload_folder(
                repo_id=repo_id, folder_path=str(folder), repo_type="model", revision=revision, create_pr=create_pr,
                commit_message=commit_message or "Upload ssa-hf checkpoint", ignore_patterns=list(ignore_patterns),
            )
        except Exception as error:
            raise PushError(explain_push_failure(error, repo_id, revision)) from error
    result.url = str(repo_url)
    result.commit_url = getattr(commit, "commit_url", None) or (str(commit) if commit is not None else None)
    return result


__all__ = ["PushError", "PushResult", "check_checkpoint_folder", "push_to_hub", "save_checkpoint_folder"]
