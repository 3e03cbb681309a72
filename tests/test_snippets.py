"""Every code block of README.md and docs/ works as written: Python runs (at the tiny sizes the docs use), YAML
parses and validates as the config it shows, and every `ssa-hf` line parses with the real command line (its
subcommand and flags exist), every script and config it names exists.

A block that cannot run here is marked on the line just above its fence: `<!-- snippet: needs-data -->` (reads the
offline data folder), `needs-gpu`, `needs-hub` (network), `slow` (minutes of work): Python is then compiled, not run,
and commands are still parsed; `<!-- snippet: skip -->` marks output, layouts or pseudo-code."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest
import yaml

from ssa_hf.cli import build_parser

from .conftest import REPO

MARKS = ("needs-data", "needs-gpu", "needs-hub", "slow", "skip")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
MARK = re.compile(r"<!-- snippet: ([\w-]+) -->\s*\n$")


def _docs() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def _snippets():
    out = []
    for path in _docs():
        text = path.read_text()
        for match in FENCE.finditer(text):
            before = text[:match.start()]
            mark = MARK.search(before[-80:])
            line = before.count("\n") + 1
            out.append(pytest.param(path, line, match.group(1), match.group(2), mark.group(1) if mark else None,
                                    id=f"{path.relative_to(REPO)}:{line}"))
    return out


SNIPPETS = _snippets()


def test_marks_are_known():
    for param in SNIPPETS:
        mark = param.values[4]
        assert mark is None or mark in MARKS, f"{param.id}: unknown snippet mark {mark!r}; use one of {MARKS}"


# ------------------------------------------------------------------------------------------------ shell
def _command_lines(code: str) -> list[str]:
    """The commands of a shell block: continuation lines joined, comments dropped, split at && ; |."""
    joined = re.sub(r"\\\n\s*", " ", code)
    commands = []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        for part in re.split(r"\s(?:&&|\|\||;|\|)\s", line):
            part = part.strip()
            if part:
                commands.append(part)
    return commands


def _words(command: str) -> list[str]:
    words = shlex.split(command, comments=True)
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):  # leading VAR=value
        words.pop(0)
    return words


def _check_paths(words: list[str], where: str) -> None:
    """Scripts, configs and accelerate configs a command names exist (placeholders in capitals are allowed)."""
    for word in words:
        for candidate in ([word] + ([word.split("=", 1)[1]] if "=" in word else [])):
            if re.fullmatch(r"(scripts|configs)/[\w./-]+\.(py|yaml|sh)", candidate):
                assert (REPO / candidate).is_file(), f"{where}: {candidate} does not exist"


def _check_ssa_hf(words: list[str], where: str) -> None:
    parser = build_parser()
    args, extra = parser.parse_known_args(words[1:])
    if getattr(args, "extra_args", False) is not True:
        assert not extra, f"{where}: `{' '.join(words)}`: unknown arguments {extra}"
    else:  # pretrain and friends take config overrides (--key value / --section.key value)
        assert all(not w.startswith("-") or re.fullmatch(r"--[\w.]+(=.*)?", w) for w in extra), (where, extra)


def _check_command(command: str, where: str) -> None:
    words = _words(command)
    if not words:
        return
    name = Path(words[0]).name
    _check_paths(words, where)
    if name == "ssa-hf":
        if any(w in ("-h", "--help") for w in words):
            return
        _check_ssa_hf(words, where)
    elif name in ("python", "python3") and len(words) > 2 and words[1] == "-m" and words[2] == "ssa_hf.cli":
        _check_ssa_hf(["ssa-hf", *words[3:]], where)
    elif name in ("python", "python3") and len(words) > 2 and words[1] == "-m":
        module = words[2]
        if module.startswith("ssa_hf"):
            import importlib.util

            assert importlib.util.find_spec(module) is not None, f"{where}: no module {module}"
    elif name == "accelerate":
        assert words[1] == "launch", f"{where}: accelerate {words[1]}"
        assert any(w.endswith("scripts/pretrain.py") or w in ("-m",) for w in words), f"{where}: launches what?"


SHELL = [p for p in SNIPPETS if p.values[2] in ("bash", "sh", "shell", "console")]
PYTHON = [p for p in SNIPPETS if p.values[2] == "python"]
YAML = [p for p in SNIPPETS if p.values[2] in ("yaml", "yml")]


@pytest.mark.parametrize("path, line, language, code, mark", SHELL)
def test_shell_snippet_names_real_commands_and_flags(path, line, language, code, mark):
    if mark == "skip":
        return
    for command in _command_lines(code):
        _check_command(command, f"{path.relative_to(REPO)}:{line}")


# ------------------------------------------------------------------------------------------------ YAML
def _validate_yaml(values: dict, where: str) -> None:
    """A pretraining config (a fragment is merged onto the tiny causal config, as a config file given to
    `ssa-hf pretrain` would be with its overrides), or an accelerate config."""
    from ssa_hf.options import deep_merge
    from ssa_hf.train import load_config

    if "compute_environment" in values or "distributed_type" in values:
        assert isinstance(values.get("num_processes", 1), int), where
        return
    if "include" in values:  # an lm-eval task file as `ssa-hf eval --data-dir` writes it: the same keys
        from ssa_hf.evaluation.lm_tasks import LOCAL_TASKS, local_task_config

        task = LOCAL_TASKS[values["task"]]
        data = Path.cwd() / "data"
        for relative in task.files.values():
            (data / relative).parent.mkdir(parents=True, exist_ok=True)
            (data / relative).write_text('{"id": "x", "question": "q", "answerKey": "A", '
                                         '"choices": {"text": ["a", "b"], "label": ["A", "B"]}}\n')
        written = local_task_config(task, data, Path.cwd() / "tasks")
        assert set(values) == set(written), f"{where}: keys {sorted(values)}, ssa-hf writes {sorted(written)}"
        assert values["dataset_path"] == written["dataset_path"], where
        return
    base = yaml.safe_load((REPO / "configs/pretrain/tiny_causal.yaml").read_text())
    load_config(None, deep_merge(base, values))


@pytest.mark.parametrize("path, line, language, code, mark", YAML)
def test_yaml_snippet_parses_and_validates(path, line, language, code, mark, tmp_path, monkeypatch):
    if mark == "skip":
        return
    where = f"{path.relative_to(REPO)}:{line}"
    try:
        values = yaml.safe_load(code)
    except yaml.YAMLError as error:
        pytest.fail(f"{where}: not valid YAML: {error}")
    assert isinstance(values, dict), f"{where}: expected a mapping"
    monkeypatch.chdir(tmp_path)
    _validate_yaml(values, where)


# ------------------------------------------------------------------------------------------------ Python
# pages whose Python is being rewritten by another part of the work: their shell and YAML blocks are checked, their
# Python blocks join this test when those pages are done (listed, not skipped silently)
PYTHON_NOT_YET_RUN = {"docs/serving.md", "docs/deploy.md"}
PYTHON_PAGES = sorted({p.values[0] for p in PYTHON}, key=str)


@pytest.mark.parametrize("path", PYTHON_PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_python_snippets_run(path, tmp_path, monkeypatch):
    """A page's Python blocks run in order in one namespace, as a reader runs them one after the other."""
    blocks = [p.values for p in PYTHON if p.values[0] == path]
    compiled = [(line, compile(code, f"{path.relative_to(REPO)}:{line}", "exec"), mark)
                for _, line, _, code, mark in blocks]
    if str(path.relative_to(REPO)) in PYTHON_NOT_YET_RUN:
        return  # compiled above
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import torch

    torch.manual_seed(0)
    namespace = {"__name__": "__snippet__"}
    for line, code, mark in compiled:
        if mark is None:  # a marked block needs data, a GPU, the Hub or minutes: compiled, not run
            exec(code, namespace)  # noqa: S102 (the project's own docs)


def test_every_block_is_checked_or_marked():
    """A fenced block in a language this test does not check must be marked (or be plain text/output)."""
    checked = {"bash", "sh", "shell", "console", "python", "yaml", "yml", "", "text", "bibtex"}
    for param in SNIPPETS:
        assert param.values[2] in checked or param.values[4] == "skip", f"{param.id}: language {param.values[2]!r}"


def test_the_checker_catches_broken_snippets():
    # an unknown flag, an unknown command and a config that does not exist are all caught
    for bad in ("ssa-hf push DIR someone/x --evaluations eval.json", "ssa-hf pretrainn --config x",
                "accelerate launch scripts/pretrain.py --config configs/pretrain/nope.yaml"):
        with pytest.raises((AssertionError, SystemExit)):
            _check_command(bad, "test")
    with pytest.raises(yaml.YAMLError):
        yaml.safe_load("model: {pretrained: ${RUN}/final, lr: 1}")  # the uptraining guide's old, invalid form


if os.environ.get("SSA_HF_SNIPPETS_LIST"):  # a maintainer's aid: list what is collected
    print(*(p.id for p in SNIPPETS), sep="\n")
