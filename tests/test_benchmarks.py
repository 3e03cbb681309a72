"""The benchmark scripts run end to end (tiny sizes: the figures themselves are not checked here, only that
every cell produces a measurement and a ratio against the baseline of the same run)."""

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO


def _run(script, *args, tmp_path):
    out = tmp_path / "bench.json"
    done = subprocess.run([sys.executable, str(REPO / "scripts" / script), *args, "--output", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["table"] in done.stdout
    return result["rows"]


def test_bench_attention_cells_and_ratios(tmp_path):
    rows = _run("bench_attention.py", "--lengths", "48", "--modes", "fwd+bwd", "decode", "--variants", "sdpa softmax",
                "blockwise ssa", "--repeats", "1", "--decode-repeats", "2", tmp_path=tmp_path)
    cells = {(r["mode"], r["variant"]): r for r in rows}
    assert set(cells) == {(m, v) for m in ("fwd+bwd", "decode") for v in ("sdpa softmax", "blockwise ssa")}
    for (mode, variant), row in cells.items():
        assert "error" not in row, row
        assert row["time_s"] > 0 and row["time_ratio"] > 0
        if variant == "sdpa softmax":
            assert row["time_ratio"] == 1.0
        if mode == "fwd+bwd":
            assert row["extra_mb"] > 0


def test_bench_attention_float16_non_causal(tmp_path):
    rows = _run("bench_attention.py", "--lengths", "40", "--modes", "fwd", "fwd+bwd", "--variants", "sdpa softmax",
                "blockwise ssa", "--repeats", "1", "--warmup", "1", "--dtype", "float16", "--no-causal",
                tmp_path=tmp_path)
    machine = json.loads((tmp_path / "bench.json").read_text())["machine"]
    assert "non-causal" in machine["shape"] and "float16" in machine["shape"] and machine["isa"] == "native"
    assert machine["torch_cpu_capability"]
    for row in rows:
        assert "error" not in row, row
        assert row["time_s"] > 0 and row["time_ratio"] > 0 and row["gemm_share"] > 0


def test_bench_attention_bf16_ukernel_beside_its_fp32_tiles(tmp_path):
    """bf16 cells of the blockwise kernel as the CPU picks its tile products and forced off the brgemm ukernel
    (its A/B), with the picks recorded."""
    rows = _run("bench_attention.py", "--lengths", "64", "--modes", "fwd+bwd", "--variants",
                "blockwise-direct ssa", "blockwise-tiles ssa", "--repeats", "1", "--warmup", "1", "--head-dim", "32",
                "--dtype", "bfloat16", tmp_path=tmp_path)
    machine = json.loads((tmp_path / "bench.json").read_text())["machine"]
    assert machine["kernel_bf16_products"] in ("brgemm ukernel", "fp32 sgemm on converted tiles")
    assert machine["kernel_f32_products"] in ("brgemm", "sgemm")
    assert {r["variant"] for r in rows} == {"sdpa softmax", "blockwise-direct ssa", "blockwise-tiles ssa"}
    for row in rows:
        assert "error" not in row, row
        assert row["time_s"] > 0 and row["time_ratio"] > 0


def test_bench_model_rows(tmp_path):
    rows = _run("bench_model.py", "--presets", "tiny_llama", "--lengths", "32", "--steps", "1", "--warmup", "1",
                "--new-tokens", "3", "--decode-repeats", "1", tmp_path=tmp_path)
    assert [r["variant"] for r in rows] == ["ssa", "softmax", "softmax sdpa", "stock sdpa"]
    for row in rows:
        assert row["train_tokens_per_s"] > 0 and row["decode_tokens_per_s"] > 0 and row["optimizer"] == "fused"  # as pretrain builds it
    assert rows[1]["train_tokens_per_s_vs_softmax"] == 1.0 and rows[2]["train_tokens_per_s_vs_sdpa"] == 1.0
    assert rows[2]["train_vs_sdpa_paired"]["median"] == 1.0 and rows[0]["decode_vs_sdpa_paired"]["rounds"] == 1
    assert rows[3]["train_tokens_per_s_vs_stock"] == 1.0 and rows[0]["decode_vs_stock_paired"]["rounds"] == 1
    # the stock LlamaForCausalLM has the ssa-hf model's sizes: the same count as its softmax twin, SSA's b and n
    # (one pair per head per layer) more for the SSA model
    assert rows[3]["parameters"] == rows[1]["parameters"] < rows[0]["parameters"]


def test_bench_model_decode_steps_time_every_copy(tmp_path):
    """--decode-steps builds each variant --copies times (mirrored build order) and pairs the per-round means."""
    rows = _run("bench_model.py", "--decode-steps", "--presets", "tiny_llama", "--lengths", "8", "--threads", "1",
                "--rounds", "2", "--steps-per-round", "1", "--copies", "2", tmp_path=tmp_path)
    assert [r["variant"] for r in rows] == ["ssa", "softmax", "softmax sdpa", "stock sdpa"]
    for row in rows:
        assert row["copies"] == 2 and row["rounds"] == 2 and row["step_us"] > 0
    assert rows[3]["vs_stock_paired"]["median"] == 1.0 and rows[0]["vs_stock_paired"]["median"] > 0


def test_paired_ratio_pairs_rounds_and_covers_the_median():
    """Ratios are taken round by round (a machine that slows down for half the rounds moves both variants, not the
    ratio), and the order-statistics interval is the binomial one: with 6 rounds [min, max] (coverage 31/32)."""
    sys.path.insert(0, str(REPO / "scripts"))
    from bench_common import paired_ratio

    baseline = [1.0, 1.0, 1.0, 10.0, 10.0, 10.0]  # the machine's state changes half-way
    twice_as_slow = [2 * t for t in baseline]
    assert paired_ratio(baseline, twice_as_slow) == {"median": 0.5, "low": 0.5, "high": 0.5, "rounds": 6}
    spread = paired_ratio([1.0] * 6, [1 / r for r in (0.8, 0.9, 1.0, 1.0, 1.1, 1.2)])
    assert spread == {"median": pytest.approx(1.0), "low": pytest.approx(0.8), "high": pytest.approx(1.2), "rounds": 6}
    assert paired_ratio([1.0] * 5, [1.0] * 5)["low"] is None  # 5 rounds: no 95% interval exists (2/32 > 0.05)


def test_bench_attention_paired_quiet_and_beside_a_busy_process(tmp_path):
    rows = _run("bench_attention.py", "--lengths", "32", "--modes", "fwd+bwd", "--variants", "blockwise ssa",
                "--repeats", "1", "--warmup", "1", "--load", "1", tmp_path=tmp_path)
    assert {(r["load"], r["variant"]) for r in rows} == {(load, v) for load in (0, 1)
                                                          for v in ("sdpa softmax", "blockwise ssa")}
    for row in rows:
        assert "error" not in row, row
        assert row["time_s"] > 0 and row["time_ratio"] > 0


def test_bench_matched_init_rows(tmp_path):
    rows = _run("bench_matched_init.py", "--ranges", "4", "--bs", "1e-3", "1e-1", "--families", "gpt2",
                tmp_path=tmp_path)
    by_b = {r["b"]: r for r in rows["scores"]}
    assert by_b[1e-3]["fp32_max_abs_diff"] < by_b[1e-1]["fp32_max_abs_diff"]  # closer to softmax as b shrinks
    models = {r["b"]: r for r in rows["models"]}
    assert models[1e-3]["within_tolerance"] and models[1e-3]["fp32_rel_diff"] < models[1e-1]["fp32_rel_diff"]


def test_gemm_share_of_bf16_is_against_the_faster_of_bf16_and_float32():
    """A CPU without bf16 products runs torch's bf16 matmul far below its float32 rate (0.3 against 116 GFLOP/s
    measured on an AVX2 Zen 3): a bf16 cell's share is then taken against the float32 rate, which converted tiles
    reach, not against the slow bf16 one (shares of thousands of percent); with native bf16 the bf16 peak counts."""
    sys.path.insert(0, str(REPO / "scripts"))
    from bench_attention import share_peak

    assert share_peak({"float32": 116.0, "bfloat16": 0.3}, "bfloat16") == 116.0
    assert share_peak({"float32": 157.0, "bfloat16": 241.0}, "bfloat16") == 241.0
    assert share_peak({"float32": 157.0, "bfloat16": 241.0}, "float32") == 157.0
    assert share_peak({"float32": 157.0}, "float16") == 157.0


def test_bench_targets_every_group_end_to_end(tmp_path):
    """The targets checklist runs each group's benchmark and reads its value from the child's JSON (smoke sizes,
    quiet: the verdicts are n/a since the targets' shapes are not used); bf16's error bound holds even here."""
    out = tmp_path / "targets.json"
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_targets.py"), "--profile", "smoke", "--load",
                           "0", "--work-dir", str(tmp_path / "children"), "--output", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["table"] in done.stdout and result["machine"]["profile"] == "smoke"
    rows = result["rows"]
    assert {r["group"] for r in rows} == {"attention", "memory", "accuracy", "decode", "training"}
    for row in rows:
        # a smoke-sized call's extra memory can read 0 MB (resident memory moves in pages)
        least = 0 if row["group"] == "memory" else 1e-12
        assert row["error"] is None and row["value"] >= least and row["verdict"] == "n/a" and row["command"], row
    accuracy = [r for r in rows if r["group"] == "accuracy"]
    assert [r["value"] <= 1.5 for r in accuracy] == [True, True, True]  # max abs, rms, max abs / max |result|
    # no result in the dtype has less error than the float64 result rounded to it (each element's least error):
    # every row's floor is at most its value, and each tensor's error is at least its own rounding error
    assert all(0 < r["floor"] <= r["value"] * (1 + 1e-12) for r in accuracy), accuracy
    own = dict(part.split() for part in accuracy[0]["note"].split("; over its own rounding error: ")[1].split(", "))
    assert sorted(own) == ["dk", "dq", "dv", "out"] and all(float(x) >= 0.995 for x in own.values()), own
    for row in accuracy:
        # every tensor's ratio is measured on its own leaves: SDPA's gradients once summed the kernel's as well (a
        # bf16 input converted to bf16 is the same tensor), which made every gradient ratio read ~0
        ratios = dict(part.split() for part in row["note"].split(";")[0].split(", "))
        assert sorted(ratios) == ["dk", "dq", "dv", "out"] and all(float(x) > 0.1 for x in ratios.values()), row
    children = sorted((tmp_path / "children").glob("*.json"))
    assert len(children) == 6  # one JSON per benchmark child
    # training: float32 weights, then float32 weights under bf16 autocast (a child of its own)
    training = [r["target"] for r in rows if r["group"] == "training"]
    assert training == ["tiny_llama float32 L=32: SSA / stock (SDPA) tokens/s",
                        "tiny_llama bf16-autocast L=32: SSA / stock (SDPA) tokens/s"]
    autocast = [json.loads(c.read_text())["machine"].get("autocast") for c in children]
    assert autocast.count(True) == 1, autocast


def test_bench_targets_accuracy_oracle_gets_the_gradient_a_half_precision_backward_receives():
    """The float64 oracle's upstream gradient is exactly what autograd hands a bf16/fp16 backward (the output's dtype):
    the same values, so the rounding of it is not charged to the kernel; and that is what a bf16 output's backward
    receives."""
    import torch

    sys.path.insert(0, str(REPO / "scripts"))
    from bench_targets import upstream_gradient

    for dtype in (torch.bfloat16, torch.float16):
        grad = upstream_gradient((2, 3, 5), torch.Generator().manual_seed(0), dtype)
        assert grad.dtype == torch.float64 and torch.equal(grad.to(dtype).double(), grad)
        assert not torch.equal(grad, torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64))
        leaf = torch.zeros(2, 3, 5, dtype=dtype, requires_grad=True)
        seen = []
        leaf.register_hook(lambda g: seen.append(g.double()))
        (leaf.double() * grad).sum().backward()
        assert torch.equal(seen[0], grad)


def test_bench_targets_verdicts():
    """met / missed from the median, the paired interval's far end noted when it crosses the bound, errors and
    smoke runs never judged."""
    sys.path.insert(0, str(REPO / "scripts"))
    from bench_targets import Row, verdict

    def row(bound, at_most, **kw):
        return Row("g", "t", bound, at_most, **kw)

    assert verdict(row(1.0, True, value=0.9)) == "met"
    assert verdict(row(1.0, True, value=1.0)) == "met"
    assert verdict(row(1.0, True, value=1.1)) == "missed"
    assert verdict(row(1.0, True, value=0.9, low=0.8, high=1.05)) == "met, interval crosses the bound"
    assert verdict(row(1.0, True, value=1.2, low=0.95, high=1.3)) == "missed, interval crosses the bound"
    assert verdict(row(0.95, False, value=1.2, low=1.1, high=1.3)) == "met"
    assert verdict(row(0.95, False, value=0.9, low=0.85, high=0.97)) == "missed, interval crosses the bound"
    # a 2-thread step beside busy processes that waited for the scheduler: the interval says nothing was resolved
    assert verdict(row(1.1, True, value=0.10, low=0.07, high=0.85)) == "met, not resolved: interval spans more than 2x"
    assert (verdict(row(0.95, False, value=1.94, low=0.18, high=17.3))
            == "met, interval crosses the bound, not resolved: interval spans more than 2x")
    assert verdict(row(1.1, True, value=1.0, low=0.6, high=1.2)) == "met, interval crosses the bound"
    assert verdict(row(1.0, True, error="timed out")) == "error"
    assert verdict(row(1.0, True)) == "error"
    assert verdict(row(1.0, True, value=3.0), judged=False) == "n/a"
    # accuracy: where even the exactly rounded result misses the bound, the verdict says no result in the dtype meets it
    assert verdict(row(1.5, True, value=1.79, floor=1.79)) == (
        "missed, unreachable in the dtype: its exactly rounded result scores 1.79")
    assert verdict(row(1.5, True, value=1.79, floor=1.2)) == "missed"
    assert verdict(row(1.5, True, value=1.1, floor=0.9)) == "met"
