"""The read-in / backbone / read-out model, a two-step training run, checkpoints and exact resume."""

import json

import pytest
import torch

from ssa_hf.icl import ICLModelConfig, RunSpec, TrainConfig
from ssa_hf.icl.tasks import Curriculum, sample_standard
from ssa_hf.icl.train import CHECKPOINT, build_model, find_checkpoint, train_run

TINY = dict(layers=1, heads=2, width=16, max_points=32)


def tiny_spec(scoring="ssa", steps=2, seed=0, **train):
    train = {"steps": steps, "batch_size": 8, "warmup_steps": 0, "checkpoint_every": 1, "log_every": 1,
             "curriculum": Curriculum(5, 7, 2, 1), **train}
    return RunSpec("every", scoring, seed, ICLModelConfig(**TINY), TrainConfig(**train))


@pytest.mark.parametrize("scoring", ["softmax", "ssa", "ssmax"])
def test_model_takes_any_scoring_function(scoring):
    model = ICLModel_of(scoring)
    prompts = sample_standard("every", 3, 5)
    assert model(prompts.features()).shape == (3, 10)
    assert model.predictions(prompts.features()).shape == (3, 5)
    assert all(layer.self_attn.scoring.scoring == scoring for layer in model.backbone.layers)
    if scoring == "ssa":
        params = model.scoring_parameters()
        assert len(params) == TINY["layers"] and all(set(v) == {"b", "n"} for v in params.values())


def ICLModel_of(scoring, **kw):
    from ssa_hf.icl import ICLModel

    return ICLModel(ICLModelConfig(**{**TINY, **kw, "attention_scoring": scoring}))


def test_attention_only_has_no_mlp():
    full, attn_only = ICLModel_of("ssa"), ICLModel_of("ssa", attention_only=True)
    assert any("mlp" in n for n, _ in full.named_parameters())
    assert not any("mlp" in n for n, _ in attn_only.named_parameters())
    assert attn_only(sample_standard("every", 2, 4).features()).shape == (2, 8)


def test_model_is_causal():
    model = ICLModel_of("ssa").eval()
    p = sample_standard("every", 2, 6).features()
    changed = p.clone()
    changed[:, 7:] += 5.0
    with torch.no_grad():
        torch.testing.assert_close(model(p)[:, :7], model(changed)[:, :7])


def test_model_config_errors_name_the_field():
    with pytest.raises(ValueError, match="model.attention_scoring"):
        ICLModelConfig(attention_scoring="nope").validate()
    with pytest.raises(ValueError, match="multiple of model.heads"):
        ICLModelConfig(width=30, heads=4).validate()
    with pytest.raises(ValueError, match="features must have shape"):
        ICLModel_of("ssa")(torch.zeros(2, 4, 3))


def test_same_seed_same_initial_weights_for_every_scoring_function():
    a = build_model(tiny_spec("softmax")).read_in.weight
    b = build_model(tiny_spec("ssa")).read_in.weight
    c = build_model(tiny_spec("ssa", seed=1)).read_in.weight
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_two_step_training_run(tmp_path):
    spec = tiny_spec("ssa")
    model, result = train_run(spec, tmp_path / "run", device="cpu", progress=False)
    assert result.steps == 2 and len(result.history) == 2
    assert all(torch.isfinite(torch.tensor(h["loss"])) for h in result.history)
    assert [h["points"] for h in result.history] == [5, 7]  # the curriculum
    checkpoint = tmp_path / "run" / CHECKPOINT
    assert (checkpoint / "model.safetensors").is_file() and (checkpoint / "optimizer.safetensors").is_file()
    assert not list(checkpoint.glob("*.pkl")) and not list(checkpoint.glob("*.bin"))  # nothing pickled
    assert json.loads((checkpoint / "run_spec.json").read_text())["attention_scoring"] == "ssa"
    assert not any(p.name.startswith(".checkpoint") for p in (tmp_path / "run").iterdir())
    # the SSA parameters were trained
    assert result.scoring_parameters != build_model(spec).scoring_parameters()
    assert not model.training


def test_resume_after_a_stop_is_exact(tmp_path):
    straight, _ = train_run(tiny_spec(steps=4), tmp_path / "a", device="cpu", progress=False)
    _, stopped = train_run(tiny_spec(steps=4), tmp_path / "b", device="cpu", progress=False, stop_at=2)
    assert stopped.steps == 2 and find_checkpoint(tmp_path / "b") is not None
    resumed, result = train_run(tiny_spec(steps=4), tmp_path / "b", device="cpu", progress=False)
    assert result.resumed_from == 2 and result.steps == 4 and len(result.history) == 4
    for (name, p), q in zip(straight.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(p, q), name
    # a finished run is loaded, not trained again
    _, again = train_run(tiny_spec(steps=4), tmp_path / "b", device="cpu", progress=False)
    assert again.resumed_from == 4 and again.history == result.history


def test_a_kill_inside_a_logging_window_resumes_its_logged_loss(tmp_path, monkeypatch):
    """A checkpoint saved between two logging steps keeps the window's loss sum: the resumed run logs what the
    uninterrupted run logs (before, the window restarted at the resume)."""
    import ssa_hf.icl.train as icl_train

    spec = tiny_spec(steps=4, checkpoint_every=2, log_every=4)
    _, straight = train_run(spec, tmp_path / "a", device="cpu", progress=False)
    original, calls = icl_train.save_checkpoint, []

    def killed_at_the_second_save(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # the process dies at step 4, its checkpoint still the one of step 2
        return original(*args, **kwargs)

    monkeypatch.setattr(icl_train, "save_checkpoint", killed_at_the_second_save)
    with pytest.raises(KeyboardInterrupt):
        train_run(spec, tmp_path / "b", device="cpu", progress=False)
    monkeypatch.setattr(icl_train, "save_checkpoint", original)
    training_state = json.loads((tmp_path / "b" / CHECKPOINT / "training_state_rank0.json").read_text())
    assert training_state["step"] == 2 and training_state["window_steps"] == 2
    _, resumed = train_run(spec, tmp_path / "b", device="cpu", progress=False)
    assert resumed.resumed_from == 2 and [h["step"] for h in resumed.history] == [4]
    assert resumed.history == straight.history and resumed.final_loss == straight.final_loss


@pytest.mark.parametrize("damage", [{"window_loss_sum": float("nan")}, {"window_steps": 9}, {"generator": "%%"}],
                         ids=["window nan", "window longer than the run", "generator"])
def test_a_damaged_training_state_is_refused_naming_it(damage, tmp_path):
    from ssa_hf.train.checkpoint import write_manifest
    from ssa_hf.train.state import CheckpointError

    train_run(tiny_spec(steps=2), tmp_path / "r", device="cpu", progress=False, stop_at=1)
    state_file = tmp_path / "r" / CHECKPOINT / "training_state_rank0.json"
    state_file.write_text(json.dumps({**json.loads(state_file.read_text()), **damage}))
    (state_file.parent / "manifest.json").unlink()
    write_manifest(state_file.parent, step=1)  # only the content check can catch it
    with pytest.raises(CheckpointError, match="training_state_rank0.json: .*the checkpoint is damaged"):
        train_run(tiny_spec(steps=2), tmp_path / "r", device="cpu", progress=False)


def test_resume_survives_a_stop_between_the_renames(tmp_path):
    train_run(tiny_spec(steps=2), tmp_path / "r", device="cpu", progress=False)
    (tmp_path / "r" / CHECKPOINT).rename(tmp_path / "r" / ".checkpoint.old")
    _, result = train_run(tiny_spec(steps=3), tmp_path / "r", device="cpu", progress=False)
    assert result.resumed_from == 2 and result.steps == 3


def test_resume_refuses_a_different_run(tmp_path):
    train_run(tiny_spec(steps=1), tmp_path / "r", device="cpu", progress=False)
    with pytest.raises(ValueError, match="train.lr"):
        train_run(tiny_spec(steps=1, lr=0.5), tmp_path / "r", device="cpu", progress=False)
    with pytest.raises(ValueError, match="scoring"):
        train_run(tiny_spec("softmax", steps=1), tmp_path / "r", device="cpu", progress=False)


def test_resume_refuses_a_checkpoint_with_more_steps_than_asked(tmp_path):
    train_run(tiny_spec(steps=2), tmp_path / "r", device="cpu", progress=False)
    spec_file = tmp_path / "r" / CHECKPOINT / "run_spec.json"
    assert json.loads(spec_file.read_text())["trained_steps"] == 2
    with pytest.raises(ValueError, match="trained 2 steps, more than train.steps=1"):
        train_run(tiny_spec(steps=1), tmp_path / "r", device="cpu", progress=False)
    # without the recorded count (older checkpoints), the loaded training state tells
    spec_file.write_text(json.dumps({k: v for k, v in json.loads(spec_file.read_text()).items() if k != "trained_steps"}))
    from ssa_hf.train.checkpoint import write_manifest

    (spec_file.parent / "manifest.json").unlink()
    write_manifest(spec_file.parent, step=2)  # an intact older checkpoint, not a damaged one
    with pytest.raises(ValueError, match="trained 2 steps"):
        train_run(tiny_spec(steps=1), tmp_path / "r", device="cpu", progress=False)


def test_paper_model_size():
    """The paper preset's backbone: GPT-2 with 12 layers, 8 heads, width 256 (about 9.6M parameters with MLPs)."""
    from ssa_hf import SSAGPT2Model
    from ssa_hf.icl import ICLModel, preset

    config = preset("paper").model
    model = ICLModel(config)
    assert isinstance(model.backbone, SSAGPT2Model) and config.backbone == "gpt2"
    assert len(model.backbone.h) == 12 and model.backbone.config.num_attention_heads == 8
    # attention (with biases), MLP of 4 x 256 (with biases), two LayerNorms, SSA's b and n (one pair per layer)
    per_layer = (4 * 256 * 256 + 4 * 256) + (2 * 256 * 1024 + 1024 + 256) + 2 * 2 * 256 + 2
    embeddings = 1 * 256 + 512 * 256 + 2 * 256  # token placeholder, 2 x 256 learned positions, final LayerNorm
    assert sum(p.numel() for p in model.parameters()) == 12 * per_layer + embeddings + (256 + 256) + (256 + 1)


def test_llama_paper_sized_model_size():
    """The same size with the Llama backbone (the quick preset's): SwiGLU MLP, RMSNorm, RoPE."""
    from ssa_hf.icl import ICLModel, preset

    config = preset("paper").model
    config.backbone = "llama"
    model = ICLModel(config)
    assert len(model.backbone.layers) == 12 and model.backbone.config.num_attention_heads == 8
    # attention, MLP, norms, SSA's b and n (the authors' setting: one pair per layer)
    per_layer = 4 * 256 * 256 + 3 * 256 * 1024 + 2 * 256 + 2
    assert sum(p.numel() for p in model.parameters()) == 12 * per_layer + 256 + 256 + (2 * 256 + 256) + (256 + 1)


def test_gpt2_backbone_reads_values_without_slot_flag_and_trains(tmp_path):
    from ssa_hf import SSAGPT2Model

    model = ICLModel_of("ssa", backbone="gpt2")
    assert isinstance(model.backbone, SSAGPT2Model) and model.read_in.in_features == 1
    assert all(block.attn.scoring.scoring == "ssa" for block in model.backbone.h)
    features = sample_standard("every", 3, 5).features()
    flipped = features.clone()
    flipped[..., 1] = 1 - flipped[..., 1]  # the slot flag is not read: absolute positions tell the slots apart
    with torch.no_grad():
        torch.testing.assert_close(model(features), model(flipped), rtol=0, atol=0)
    spec = tiny_spec()
    spec.model.backbone = "gpt2"
    trained, result = train_run(spec, tmp_path / "gpt2", device="cpu", progress=False)
    assert result.steps == 2 and all(torch.isfinite(torch.tensor(h["loss"])) for h in result.history)
    assert isinstance(trained.backbone, SSAGPT2Model)
    assert json.loads((tmp_path / "gpt2" / CHECKPOINT / "run_spec.json").read_text())["model"]["backbone"] == "gpt2"
    with pytest.raises(ValueError, match="MLP-free variant exists for backbone 'llama' only"):
        ICLModel_of("ssa", backbone="gpt2", attention_only=True)
    with pytest.raises(ValueError, match="unknown backbone 'bert'"):
        ICLModel_of("ssa", backbone="bert")


def test_training_off_a_terminal_logs_plain_progress_lines(tmp_path, caplog):
    """Without a progress bar (a log file, a batch job) a run says where it is: its first logged step at once, then
    at most one line every 30 s."""
    with caplog.at_level("INFO", logger="ssa_hf.icl"):
        train_run(tiny_spec(steps=4, log_every=1), tmp_path / "run", device="cpu", progress=False)
    lines = [r.getMessage() for r in caplog.records if ": step " in r.getMessage()]
    assert lines and lines[0].startswith("every-ssa-seed0: step 1/4, loss ")
