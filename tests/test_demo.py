"""`ssa-hf demo`: the collapse numbers and the files it writes."""

import json

from ssa_hf.cli import main
from ssa_hf.demo import DemoConfig, run_demo


def test_demo_shows_softmax_collapse_and_ssa_keeping_mass(tmp_path):
    result = run_demo(DemoConfig(), output_dir=tmp_path)
    softmax, ssa = result["curves"]["softmax"], result["curves"]["ssa"]
    # softmax collapses onto the large token as scores grow; SSA keeps mass on the others
    assert softmax["max_weight"][-1] > 0.9999 and softmax["entropy"][-1] < 1e-3
    assert ssa["max_weight"][-1] < 0.8 and ssa["entropy"][-1] > 0.5
    assert all(a <= b + 1e-12 for a, b in zip(softmax["max_weight"], softmax["max_weight"][1:]))
    for name in ("demo.json", "demo.md", "demo.png"):
        assert (tmp_path / name).stat().st_size > 0
    assert (tmp_path / "demo.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((tmp_path / "demo.json").read_text())["large_token"] == 7


def test_demo_command(tmp_path, capsys):
    assert main(["demo", "--output-dir", str(tmp_path)]) == 0
    assert "softmax max weight" in capsys.readouterr().out
    assert (tmp_path / "demo.png").exists()
