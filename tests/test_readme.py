"""The README keeps exactly two set-up commands, and CI runs the test command verbatim."""

import re
import subprocess

from .conftest import REPO


def _commands():
    text = (REPO / "README.md").read_text()
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"<!-- (\w+-command) -->\s*```bash\n(.*?)\n```", text, re.S)}


def test_readme_has_main_and_test_commands():
    commands = _commands()
    assert set(commands) == {"main-command", "test-command"}
    for command in commands.values():
        assert "pip install" in command and "torch==2.13.0" in command
    # the main job installs what `ssa-hf icl` needs (the [icl] extra, or [dev], which holds it); the tests [dev]
    assert re.search(r'-e "\.\[(icl|dev)\]"', commands["main-command"])
    assert '-e ".[dev]"' in commands["test-command"]
    assert "pytest" in commands["test-command"]
    assert "ssa-hf icl " in commands["main-command"]


def test_readme_shows_a_command_early():
    lines = (REPO / "README.md").read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("```bash"))
    assert first < 30, f"the first command is on line {first + 1}"


def test_ci_runs_the_readme_test_command():
    extracted = subprocess.run(
        ["awk", '/<!-- test-command -->/{found=1; next} found && /^```bash/{getline; print; exit}', str(REPO / "README.md")],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    assert extracted == _commands()["test-command"]
    assert "README.md" in (REPO / ".ci" / "run").read_text()
