"""Export of ssa-hf models (ssa_hf/serving/export.py, ssa_hf/models/onnx_ops.py, `ssa-hf export`): ONNX that
onnxruntime runs with eager's outputs for every family, a .pt2 that a new process loads after `import ssa_hf` alone
(or after loading the model's remote code), a decoding step over a static cache, programs and AOTInductor packages
without the ssa-hf op, and ONNX that computes SSA (not softmax)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from ssa_hf.serving import export as ex
from tests.models.tiny import build

FAMILIES = ["llama", "gpt2", "bert"]
REPO = Path(__file__).resolve().parents[2]


def _run(script: str, *args: str, cwd=None) -> subprocess.CompletedProcess:
    env = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args], capture_output=True, text=True,
                          env=env, cwd=cwd or REPO, timeout=300)


def _ops(onnx_path) -> set[str]:
    import onnx

    model = onnx.load(str(onnx_path), load_external_data=False)
    found = {node.op_type for node in model.graph.node}
    for function in model.functions:
        found |= {node.op_type for node in function.node}
    return found


def _save_case(model, path, batch_size: int, length: int, seed: int) -> None:
    """Inputs of a new shape and the eager logits, saved for a subprocess to compare with."""
    inputs = ex.sample_inputs(model, batch_size=batch_size, length=length, seed=seed)
    with torch.no_grad():
        want = model(**inputs).logits
    torch.save({"ids": inputs["input_ids"], "mask": inputs["attention_mask"], "want": want}, path)


@pytest.mark.parametrize("family", FAMILIES)
def test_onnx_export_runs_on_onnxruntime_with_eager_outputs(family, tmp_path):
    """The default attention (the custom op) exports through its ONNX translation; onnxruntime's outputs on inputs of
    another batch size and length than traced equal eager's within fp32 tolerance."""
    model = build(family)
    result = ex.export_onnx(model, tmp_path / "onnx")
    assert result.artifact == tmp_path / "onnx" / "model.onnx" and result.artifact.is_file()
    assert result.max_abs_diff is not None and result.max_abs_diff < 2e-5, result.summary()
    ops = _ops(result.artifact)
    assert {"Sign", "Log", "Abs", "Softmax"} <= ops, ops  # SSA's g(s) = n sgn(s) log(1 + b|s|), softmax over g
    inputs = ex.sample_inputs(model, batch_size=3, length=11, seed=7)
    got = ex.run_onnx(result.artifact, inputs)
    with torch.no_grad():
        want = model(**inputs).logits
    np.testing.assert_allclose(got, want.numpy(), atol=2e-5, rtol=1e-5)
    manifest = json.loads((tmp_path / "onnx" / "export.json").read_text())
    assert manifest["format"] == "onnx" and manifest["inputs"] == ["input_ids", "attention_mask"]
    assert manifest["output_name"] == "logits" and manifest["checked_with"] == "onnxruntime (CPU)"


def test_transformers_onnx_exporter_translates_the_op_once_registered():
    """transformers' own OnnxExporter passes no table of ours: after `register_onnx_translation` (onnxscript's
    registry) it exports an SSA model, and its onnxruntime runner gives eager's logits."""
    from transformers.exporters import OnnxConfig, OnnxExporter

    ex.register_onnx_translation()
    ex.register_onnx_translation()  # idempotent
    model = build("gpt2")
    inputs = ex.sample_inputs(model, batch_size=2, length=9, seed=6)
    exported = OnnxExporter().export(model, dict(inputs), config=OnnxConfig())
    with torch.no_grad():
        want = model(**inputs).logits
    torch.testing.assert_close(torch.as_tensor(exported(**inputs).logits), want, atol=2e-5, rtol=1e-5)


def _attention_module(scoring: str):
    """A module that runs ssa-hf's kernel op (SSA with fixed b, n, or softmax) on its inputs, causal."""
    from ssa_hf.models.blockwise import run_blockwise

    class Attention(torch.nn.Module):
        def forward(self, q, k, v):
            if scoring == "ssa":
                return run_blockwise(q, k, v, torch.tensor([0.8, 1.2]), torch.tensor([1.5, 2.0]), None, True, None)
            return run_blockwise(q, k, v, None, None, None, True, None)

    return Attention()


def _reference(q, k, v, ssa: bool):
    """Causal attention in float64: softmax(g(s)) with g = n sgn(s) log(1 + b|s|), or softmax(s)."""
    q, k, v = (t.double() for t in (q, k, v))
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if ssa:
        b, n = torch.tensor([0.8, 1.2]).double().view(1, 2, 1, 1), torch.tensor([1.5, 2.0]).double().view(1, 2, 1, 1)
        s = torch.sign(s) * torch.log1p(b * s.abs()) * n
    s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v


def test_onnx_of_ssa_computes_ssa_not_softmax(tmp_path):
    """On large scores SSA and softmax differ by far more than rounding: the ONNX export of the SSA op gives SSA's
    float64 result, and that of the softmax op softmax's, each far from the other."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 6, 8, generator=gen) * 4 for _ in range(3))  # |s| up to ~40
    got = {}
    for scoring in ("ssa", "softmax"):
        program = torch.export.export(_attention_module(scoring), (q, k, v))
        path = tmp_path / f"{scoring}.onnx"
        torch.onnx.export(program, (q, k, v), dynamo=True, custom_translation_table=ex.onnx_translation_table(),
                          input_names=["q", "k", "v"], verbose=False).save(str(path))
        got[scoring] = ex.run_onnx(path, {"q": q, "k": k, "v": v})
    ssa, softmax = _reference(q, k, v, True).numpy(), _reference(q, k, v, False).numpy()
    assert np.abs(ssa - softmax).max() > 0.1  # the inputs tell the two apart
    np.testing.assert_allclose(got["ssa"], ssa, atol=1e-5)
    np.testing.assert_allclose(got["softmax"], softmax, atol=1e-5)
    assert {"Sign", "Log"} <= _ops(tmp_path / "ssa.onnx") and "Sign" not in _ops(tmp_path / "softmax.onnx")


def test_decomposed_program_holds_no_ssa_op_and_matches_eager():
    """What AOTInductor compiles: the program with the attention op written in ATen operators (fast check of the
    AOTInductor route, on the grouped-query family; the compile itself is in the slow test below)."""
    model = build("llama")
    program = ex.trace(model, decompose=True)
    assert "ssa_hf" not in str(program.graph)
    inputs = ex.sample_inputs(model, batch_size=3, length=9, seed=3)
    with torch.no_grad():
        want = model(**inputs)[0]
        got = program.module()(inputs["input_ids"], inputs["attention_mask"])
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-5)


PT2_AFTER_IMPORT = """
    import sys, torch
    import ssa_hf  # the only import: no ssa_hf.models, no transformers before loading
    assert "ssa_hf.models" not in sys.modules and "transformers" not in sys.modules
    program = torch.export.load(sys.argv[1] + "/model.pt2")
    assert "ssa_hf.attention_forward_v2" in str(program.graph)
    data = torch.load(sys.argv[1] + "/inputs.pt")
    with torch.no_grad():
        got = program.module()(data["ids"], data["mask"])
    torch.testing.assert_close(got, data["want"], atol=0, rtol=0)
    print("ok")
"""


def test_pt2_loads_in_a_new_process_after_import_ssa_hf_alone(tmp_path):
    model = build("llama")
    result = ex.export_program(model, tmp_path / "pt2")
    assert result.max_abs_diff == 0.0  # the same kernel runs in the loaded program
    assert "ssa_hf.attention_forward_v2" in str(torch.export.load(result.artifact).graph)  # kept as the op
    _save_case(model, tmp_path / "pt2/inputs.pt", 3, 10, 5)
    done = _run(PT2_AFTER_IMPORT, str(tmp_path / "pt2"))
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-3000:]


PT2_REMOTE_CODE = """
    import sys, torch
    sys.modules["ssa_hf"] = None  # not installed: the checkpoint's own code must define the op
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(sys.argv[1], trust_remote_code=True)
    assert "transformers_modules" in type(model).__module__
    program = torch.export.load(sys.argv[1] + "/export/model.pt2")
    data = torch.load(sys.argv[1] + "/inputs.pt")
    with torch.no_grad():
        got = program.module()(data["ids"], data["mask"])
    torch.testing.assert_close(got, data["want"], atol=0, rtol=0)
    print("ok")
"""


def test_pt2_loads_after_the_remote_code_without_ssa_hf(tmp_path):
    model = build("gpt2")
    model.save_pretrained(tmp_path / "ckpt")
    ex.export_program(model, tmp_path / "ckpt" / "export", check=False)
    _save_case(model, tmp_path / "ckpt/inputs.pt", 2, 7, 2)
    done = _run(PT2_REMOTE_CODE, str(tmp_path / "ckpt"), cwd=tmp_path)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-3000:]


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_decode_step_with_static_cache_matches_eager(family, tmp_path):
    """One decoding step over transformers' StaticCache, exported with the SSA op: fed a prompt token by token, each
    step's logits equal the eager (cache-less) forward's at that position."""
    result = ex.export_program(build(family), tmp_path / "step", decode_step=True, max_cache_len=16)
    assert result.decode_step and result.max_abs_diff < 1e-5, result.summary()
    program = torch.export.load(result.artifact)
    assert "ssa_hf.attention_forward_v2" in str(program.graph)
    assert json.loads((tmp_path / "step/export.json").read_text())["inputs"] == ["input_ids", "cache_position"]


AOTI_WITHOUT_SSA_HF = """
    import sys, torch
    sys.modules["ssa_hf"] = None  # ssa-hf may not be imported: the package must run with torch alone
    runner = torch._inductor.aoti_load_package(sys.argv[1] + "/model_aoti.pt2")
    data = torch.load(sys.argv[1] + "/inputs.pt")
    got = runner(data["ids"], data["mask"])
    torch.testing.assert_close(got, data["want"], atol=2e-5, rtol=1e-5)
    assert not any(name.startswith("ssa_hf") for name in sys.modules if sys.modules[name] is not None)
    print("ok")
"""


@pytest.mark.slow
def test_aoti_package_runs_in_a_new_process_without_ssa_hf(tmp_path):
    """AOTInductor compiles for about a minute here, hence slow (the decomposed program it compiles is checked in
    the default run)."""
    model = build("llama")
    result = ex.export_aoti(model, tmp_path / "aoti")
    assert result.max_abs_diff < 2e-5, result.summary()
    _save_case(model, tmp_path / "aoti/inputs.pt", 3, 13, 4)
    done = _run(AOTI_WITHOUT_SSA_HF, str(tmp_path / "aoti"), cwd=tmp_path)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-3000:]


def test_an_export_that_disagrees_with_eager_is_refused_and_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.setattr(ex, "_eager", lambda model, inputs: torch.zeros(1))
    with pytest.raises(ex.ExportCheckError, match="nothing was written"):
        ex.export_program(build("bert"), tmp_path / "out", dynamic=False)
    assert not (tmp_path / "out").exists() and list(tmp_path.iterdir()) == []


def test_cli_export_writes_the_folder_and_refuses_links_and_existing_folders(tmp_path, capsys):
    from ssa_hf.cli import main

    build("bert").save_pretrained(tmp_path / "ckpt")
    assert main(["export", str(tmp_path / "ckpt"), "--format", "pt2", "--output", str(tmp_path / "out")]) == 0
    assert "max |torch.export.load - eager|" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["export.json", "model.pt2"]
    # an existing folder is replaced only with --overwrite; a link on the way out is never written through
    assert main(["export", str(tmp_path / "ckpt"), "--format", "pt2", "--output", str(tmp_path / "out")]) == 2
    assert "already exists" in capsys.readouterr().err
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    args = ["export", str(tmp_path / "ckpt"), "--format", "pt2", "--output", str(tmp_path / "link"), "--overwrite"]
    assert main(args) == 2
    assert "symbolic link" in capsys.readouterr().err and not any((tmp_path / "elsewhere").iterdir())


def test_cli_onnx_without_the_extra_is_one_line(tmp_path, capsys, monkeypatch):
    import ssa_hf.extras as extras
    from ssa_hf.cli import main

    monkeypatch.setattr(extras, "missing_modules", lambda extra: ["onnxscript"])
    assert main(["export", str(tmp_path), "--format", "onnx", "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and 'pip install "ssa-hf[export]"' in err
    assert not (tmp_path / "out").exists()
