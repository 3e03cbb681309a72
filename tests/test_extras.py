"""The light install: the core (models, kernel, convert, push) works without any extra, and a command whose extra is
missing says which one to install in one line, before any work.

The optional packages are hidden in a child process (`sys.modules[name] = None`: `import name` fails and
`importlib.util.find_spec(name)` answers None, as where they are not installed); scripts/smoke_installed.sh checks
the same on a real core-only install.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ssa_hf.extras import EXTRAS, MissingExtraError, require_extra

REPO = Path(__file__).resolve().parents[1]
OPTIONAL = sorted({m for modules in EXTRAS.values() for m in modules} | {"tensorboard"})

CHILD = textwrap.dedent("""
    import contextlib, io, json, sys
    for name in {optional!r}:
        sys.modules[name] = None
    from ssa_hf.cli import main

    def run(*argv):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(list(argv))
        return code, err.getvalue()

    results = {{}}
    {body}
    loaded = sorted(name for name in {optional!r} if sys.modules.get(name) is not None)
    print(json.dumps({{"results": results, "loaded": loaded}}))
""")


def run_child(tmp_path: Path, body: str) -> dict:
    code = CHILD.format(optional=OPTIONAL, body=textwrap.dedent(body).strip())
    env = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
           "PYTHONPATH": str(REPO), "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_require_extra_names_the_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "lm_eval", None)
    with pytest.raises(MissingExtraError, match=r'ssa-hf eval needs the \[eval\] extra \(lm_eval not installed\): '
                                                r'pip install "ssa-hf\[eval\]"'):
        require_extra("eval", "ssa-hf eval")
    require_extra("train", "ssa-hf pretrain")  # installed here: no error


def test_core_commands_run_without_any_extra(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=1)).save_pretrained(tmp_path / "llama")
    result = run_child(tmp_path, """
        results["params"] = run("params", "tiny_llama")
        results["convert"] = run("convert", "llama", "llama_ssa")
        results["push"] = run("push", "llama_ssa", "someone/tiny-ssa", "--dry-run", "--no-validate-online")
        results["demo"] = run("demo", "--output-dir", "demo")
        import torch
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_pretrained("llama_ssa")
        out = model.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=4, do_sample=False)
        results["generate"] = [type(model).__name__, out.shape[1]]
    """)
    results = result["results"]
    for name in ("params", "convert", "push", "demo"):
        assert results[name][0] == 0, (name, results[name][1][-2000:])
    assert results["generate"] == ["SSALlamaForCausalLM", 7]
    assert result["loaded"] == []
    assert (tmp_path / "demo" / "demo.json").is_file() and not (tmp_path / "demo" / "demo.png").exists()


@pytest.mark.parametrize("argv, extra", [
    (["pretrain", "--config", "configs/pretrain/tiny_causal.yaml"], "train"),
    (["uptrain-demo", "--output-dir", "x"], "train"),
    (["eval", "model"], "eval"),
    (["probe", "model"], "eval"),
    (["perplexity", "model"], "eval"),
    (["compare", "a", "b"], "eval"),
    (["icl", "--preset", "quick"], "icl"),
    (["reproduce", "--scale", "cpu", "--plan"], "experiments"),
    (["serve", "model"], "serve"),
    (["export", "model", "--format", "onnx", "--output", "x"], "export"),
])
def test_a_command_without_its_extra_says_which_to_install(tmp_path, argv, extra):
    result = run_child(tmp_path, f"results['run'] = run(*{argv!r})")
    code, stderr = result["results"]["run"]
    assert code == 2
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert f'pip install "ssa-hf[{extra}]"' in lines[0]
    assert not (tmp_path / "x").exists()  # refused before any work
