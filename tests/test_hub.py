"""Checkpoint conversion, model cards and pushing (offline: the Hub's HTTP calls are replaced by recorders)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard
from safetensors import safe_open

import ssa_hf
from ssa_hf.cli import main as cli
from ssa_hf.hub import (
    ConversionError,
    EvaluationResult,
    convert_checkpoint,
    normalize_evaluation,
    push_to_hub,
    read_scoring_parameters,
    render_model_card,
    save_checkpoint_folder,
    validate_model_card,
)
from ssa_hf.presets import build_model, load_model_config

VOCAB = 64
SECRET = "hf_ssaTestTokenNeverPrinted0123456789"


# ----------------------------------------------------------------------------------------------- fixtures


def tiny_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(["<s>", "<pad>", "</s>", "<unk>"] + [f"w{i}" for i in range(VOCAB - 4)])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   unk_token="<unk>")


def sharpen(model, factor: float = 20.0, mix: float = 5.0) -> None:
    """Scale query and key projections so attention scores are large (for small scores SSA behaves like a
    softmax at temperature 1/(n b)), and value/output projections so attention matters for the output: SSA then
    differs clearly from softmax."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if any(k in name for k in ("q_proj.weight", "k_proj.weight", "self.query.weight", "self.key.weight")):
                p.mul_(factor)
            if any(k in name for k in ("v_proj.weight", "o_proj.weight", "self.value.weight", "attention.output.dense.weight")):
                p.mul_(mix)
            if name.endswith("attn.c_attn.weight"):  # GPT-2's fused [q | k | v] projection (Conv1D: [in, 3 out])
                width = p.shape[0]
                p[:, : 2 * width].mul_(factor)
                p[:, 2 * width :].mul_(mix)
            if name.endswith("attn.c_proj.weight"):
                p.mul_(mix)


def make_llama(folder: Path):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))
    sharpen(model)
    model.save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return model


def make_roberta(folder: Path):
    from transformers import RobertaConfig, RobertaForMaskedLM

    torch.manual_seed(1)
    model = RobertaForMaskedLM(RobertaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                             num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=40))
    sharpen(model)
    model.save_pretrained(folder)
    return model


def make_bert(folder: Path, **kwargs):
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(2)
    model = BertForMaskedLM(BertConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                       num_attention_heads=4, max_position_embeddings=24, **kwargs))
    sharpen(model)
    model.save_pretrained(folder)
    return model


def make_gpt2(folder: Path):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(3)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                       bos_token_id=0, eos_token_id=2))
    sharpen(model)
    model.save_pretrained(folder)
    return model


SOURCES = {"llama": make_llama, "roberta": make_roberta, "bert": make_bert, "gpt2": make_gpt2}
CAUSAL = ("llama", "gpt2")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("hub")


@pytest.fixture(scope="module")
def sources(workdir):
    """One tiny random checkpoint per supported source architecture: {kind: (folder, model)}."""
    out = {}
    for kind, make in SOURCES.items():
        folder = workdir / f"src_{kind}"
        out[kind] = (folder, make(folder).eval())
    return out


@pytest.fixture(scope="module")
def converted(workdir, sources):
    """Each source converted to softmax and to SSA (n = 2): {(kind, scoring): (folder, ConversionResult)}."""
    out = {}
    for kind, (folder, _) in sources.items():
        for scoring in ("softmax", "ssa"):
            dst = workdir / f"{kind}_{scoring}"
            extra = {"ssa_n_init": 2.0} if scoring == "ssa" else {}
            out[kind, scoring] = (dst, convert_checkpoint(folder, dst, scoring, **extra))
    return out


def inputs_for(kind: str, seed: int = 0, padded: bool = False):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (2, 10), generator=g)  # ids 0..2 are special (pad is 1 for RoBERTa, 0 for BERT)
    mask = torch.ones_like(ids)
    if padded:
        pad = 0 if kind == "bert" else 1
        ids[1, 6:] = pad
        mask[1, 6:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def load_converted(folder: Path, kind: str):
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    auto = AutoModelForCausalLM if kind in CAUSAL else AutoModelForMaskedLM
    return auto.from_pretrained(folder).eval()


# ---------------------------------------------------------------------------------------------- converting


@pytest.mark.parametrize("kind", list(SOURCES))
def test_softmax_conversion_reproduces_the_source(kind, sources, converted):
    _, source = sources[kind]
    folder, result = converted[kind, "softmax"]
    model = load_converted(folder, kind)
    assert type(model).__name__ == result.target_class
    assert model.config.attention_scoring == "softmax"
    assert result.output_check["performed"] and result.output_check["must_match"]
    assert result.initialised_tensors == []  # softmax has no scoring parameters: every weight came from the source
    batch = inputs_for(kind, seed=3, padded=True)
    with torch.no_grad():
        expected, got = source(**batch).logits, model(**batch).logits
    keep = batch["attention_mask"].bool()  # right padding: positions of real tokens agree exactly
    torch.testing.assert_close(got[keep], expected[keep], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", list(SOURCES))
def test_ssa_conversion_loads_differs_and_trains(kind, sources, converted):
    _, source = sources[kind]
    folder, result = converted[kind, "ssa"]
    model = load_converted(folder, kind)
    assert model.config.attention_scoring == "ssa" and model.config.ssa_n_init == 2.0
    layers = model.config.num_hidden_layers
    assert len(result.initialised_tensors) == 2 * layers and all(".scoring." in k for k in result.initialised_tensors)
    values = model.scoring_parameters()
    assert len(values) == layers
    for params in values.values():
        assert params["n"] == pytest.approx([2.0] * 4) and params["b"] == pytest.approx([1.0] * 4)
    # the copied weights are the source's
    source_state = source.state_dict()
    for key, tensor in model.state_dict().items():
        if key in source_state and "position_embeddings" not in key:
            torch.testing.assert_close(tensor, source_state[key], rtol=0, atol=0)
    batch = inputs_for(kind, seed=4)
    with torch.no_grad():
        expected = source(**batch).logits
    model.train(False)
    out = model(**batch, labels=batch["input_ids"])
    assert torch.isfinite(out.logits).all()
    assert (out.logits - expected).abs().max() > 1e-2  # SSA changed the attention
    out.loss.backward()
    grads = [p.grad for n, p in model.named_parameters() if ".scoring." in n]
    assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)


def test_conversion_copies_tokenizer_and_writes_card(sources, converted):
    folder, result = converted["llama", "ssa"]
    for name in ("ssa_conversion.json", "README.md", "ssa_hf_card.json"):  # no local paths go to the Hub
        assert str(sources["llama"][0]) not in (folder / name).read_text()
    assert "tokenizer.json" in result.tokenizer_files and (folder / "tokenizer.json").is_file()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer("w1 w2").input_ids == [5, 6]
    record = json.loads((folder / "ssa_conversion.json").read_text())
    assert record["source_class"] == "LlamaForCausalLM" and record["target_class"] == "SSALlamaForCausalLM"
    card = ModelCard.load(folder / "README.md")
    assert card.data.pipeline_tag == "text-generation" and "ssa-hf" in card.data.tags
    assert card.data.ssa_hf["scoring"]["ssa_n_init"] == 2.0
    assert "## Conversion" in card.text and "trust_remote_code=True" in card.text
    assert (folder / "generation_config.json").is_file()
    # no temporary folders left beside the destination
    assert not [p for p in folder.parent.iterdir() if ".tmp-" in p.name]


def test_converted_folders_load_without_ssa_hf(converted, tmp_path):
    """trust_remote_code loads the converted folders in an interpreter where ssa_hf cannot be imported."""
    expected = {}
    for kind in ("llama", "bert"):
        folder, _ = converted[kind, "ssa"]
        batch = inputs_for(kind, seed=5)
        with torch.no_grad():
            expected[kind] = {"folder": str(folder), "batch": batch, "logits": load_converted(folder, kind)(**batch).logits}
    torch.save(expected, tmp_path / "expected.pt")
    script = textwrap.dedent("""
        import sys
        sys.modules["ssa_hf"] = None  # the package is installed editable in this venv: block it
        import torch
        from transformers import AutoModelForCausalLM, AutoModelForMaskedLM
        cases = torch.load(sys.argv[1], weights_only=False)
        for kind, case in cases.items():
            auto = AutoModelForCausalLM if kind == "llama" else AutoModelForMaskedLM
            model = auto.from_pretrained(case["folder"], trust_remote_code=True).eval()
            assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
            assert model.config._attn_implementation == "ssa_auto", model.config._attn_implementation
            with torch.no_grad():
                logits = model(**case["batch"]).logits
            torch.testing.assert_close(logits, case["logits"], rtol=1e-5, atol=1e-5)
            print("loaded", kind, type(model).__name__)
        try:
            import ssa_hf  # noqa: F401
            print("ssa_hf was importable")
        except ImportError:
            pass
    """)
    (tmp_path / "load.py").write_text(script)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_MODULES_CACHE=str(tmp_path / "modules"), HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error")
    proc = subprocess.run([sys.executable, str(tmp_path / "load.py"), str(tmp_path / "expected.pt")], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "loaded llama SSALlamaForCausalLM" in proc.stdout and "loaded bert SSABertForMaskedLM" in proc.stdout
    assert "ssa_hf was importable" not in proc.stdout


def test_sequence_classification_conversion(tmp_path):
    from transformers import LlamaConfig, LlamaForSequenceClassification

    torch.manual_seed(3)
    source = LlamaForSequenceClassification(LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
        num_labels=3, pad_token_id=0)).eval()
    source.save_pretrained(tmp_path / "src")
    result = convert_checkpoint(tmp_path / "src", tmp_path / "dst", "softmax")
    assert result.target_class == "SSALlamaForSequenceClassification" and result.output_check["must_match"]
    model = ssa_hf.SSALlamaForSequenceClassification.from_pretrained(tmp_path / "dst").eval()
    batch = inputs_for("llama", seed=6)
    with torch.no_grad():
        torch.testing.assert_close(model(**batch).logits, source(**batch).logits, rtol=1e-5, atol=1e-5)
    assert ModelCard.load(tmp_path / "dst" / "README.md").data.pipeline_tag == "text-classification"


def test_conversion_dtype_and_ssa_source(workdir, converted):
    # an ssa-hf softmax checkpoint converted to SSA, saved in bfloat16
    src, _ = converted["roberta", "softmax"]
    dst = workdir / "roberta_softmax_to_ssa_bf16"
    result = convert_checkpoint(src, dst, "ssa", dtype="bfloat16", ssa_learn_n=False, ssa_n_init=1.5)
    assert result.dtype == "bfloat16" and result.source_class == "SSABertForMaskedLM"
    with safe_open(str(dst / "model.safetensors"), framework="pt") as f:
        key = next(k for k in f.keys() if k.endswith("query.weight"))
        assert f.get_tensor(key).dtype == torch.bfloat16
        fixed = [k for k in f.keys() if k.endswith("params.n.value")]
        assert len(fixed) == 2  # fixed n is a stored buffer, not a parameter
    # the scoring values are read from the safetensors without loading the model
    values = read_scoring_parameters(dst)
    assert all(v["n"] == pytest.approx([1.5] * 4) for v in values.values())
    with pytest.raises(ConversionError, match="nothing to convert"):
        convert_checkpoint(dst, workdir / "again", "ssa", ssa_learn_n=False, ssa_n_init=1.5)


def test_conversion_refusals(workdir, sources, tmp_path):
    llama_src, _ = sources["llama"]
    with pytest.raises(FileExistsError, match="already exists"):
        convert_checkpoint(llama_src, workdir / "llama_ssa")
    with pytest.raises(ValueError, match="only the attention scoring.*hidden_size"):
        convert_checkpoint(llama_src, tmp_path / "x", hidden_size=64)
    with pytest.raises(ValueError, match="unknown scoring function"):
        convert_checkpoint(llama_src, tmp_path / "x", "ssaa")
    t5 = tmp_path / "t5"
    t5.mkdir()
    (t5 / "config.json").write_text(json.dumps({"model_type": "t5", "architectures": ["T5ForConditionalGeneration"]}))
    with pytest.raises(ConversionError, match="model_type 't5' cannot be converted"):
        convert_checkpoint(t5, tmp_path / "x")
    gpt2_heads = tmp_path / "gpt2_heads"
    gpt2_heads.mkdir()
    (gpt2_heads / "config.json").write_text(json.dumps({"model_type": "gpt2", "architectures": ["GPT2DoubleHeadsModel"]}))
    with pytest.raises(ConversionError, match="GPT2DoubleHeadsModel.*not supported for gpt2"):
        convert_checkpoint(gpt2_heads, tmp_path / "x")
    relu_bert = tmp_path / "relu_bert"
    make_bert(relu_bert, hidden_act="relu")
    with pytest.raises(ConversionError, match="hidden_act='relu'"):
        convert_checkpoint(relu_bert, tmp_path / "x")
    with pytest.raises(FileNotFoundError):
        convert_checkpoint(tmp_path / "missing", tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_failed_conversion_leaves_nothing(sources, tmp_path, monkeypatch):
    def broken_save(self, *args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(ssa_hf.SSALlamaForCausalLM, "save_pretrained", broken_save)
    with pytest.raises(RuntimeError, match="disk full"):
        convert_checkpoint(sources["llama"][0], tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_convert_command(sources, tmp_path, capsys):
    dst = tmp_path / "cli_out"
    rc = cli(["convert", str(sources["roberta"][0]), str(dst), "--attention-scoring", "softmax", "--license",
              "apache-2.0"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "RobertaForMaskedLM -> SSABertForMaskedLM" in out and "matches the source" in out
    assert ModelCard.load(dst / "README.md").data.license == "apache-2.0"
    assert cli(["convert", str(sources["roberta"][0]), str(dst)]) == 2
    assert "already exists" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------- model cards


LM_EVAL_JSON = {
    "results": {
        "arc_easy": {"alias": "arc_easy", "acc,none": 0.41, "acc_stderr,none": 0.01, "acc_norm,none": 0.39,
                     "acc_norm_stderr,none": 0.012},
        "boolq": {"alias": "boolq", "acc,none": 0.6, "acc_stderr,none": 0.02},
    },
    "n-shot": {"arc_easy": 0, "boolq": 0},
    "configs": {"arc_easy": {"dataset_path": "allenai/ai2_arc", "dataset_name": "ARC-Easy", "test_split": "test"},
                "boolq": {"dataset_path": "super_glue", "dataset_name": "boolq", "validation_split": "validation"}},
}


def test_lm_eval_results_are_read():
    results = normalize_evaluation(LM_EVAL_JSON)
    got = {(r.task, r.metric): r for r in results}
    assert set(got) == {("arc_easy", "acc"), ("arc_easy", "acc_norm"), ("boolq", "acc")}
    assert got["arc_easy", "acc_norm"].stderr == 0.012 and got["arc_easy", "acc_norm"].num_fewshot == 0
    assert got["arc_easy", "acc"].dataset == "allenai/ai2_arc" and got["boolq", "acc"].split == "validation"


@pytest.mark.parametrize("bad, message", [
    ([{"task": "x", "metric": "acc"}], "missing \\['value'\\]"),
    ([{"task": "x", "metric": "acc", "value": 0.5, "shots": 0}], "unknown keys \\['shots'\\]"),
    ([{"task": "x", "metric": "acc", "value": float("nan")}], "finite number"),
    ([{"task": "x", "metric": "acc", "value": 0.5, "num_fewshot": -1}], "num_fewshot"),
    ({"scores": []}, "expected a list"),
])
def test_bad_evaluation_input(bad, message):
    with pytest.raises(ValueError, match=message):
        normalize_evaluation(bad)


def test_card_from_config_has_metadata_and_text():
    config = load_model_config("decoder_114m")
    evaluation = [
        {"task": "arc_easy", "metric": "acc_norm", "value": 0.5387, "dataset": "allenai/ai2_arc",
         "dataset_config": "ARC-Easy", "split": "test", "num_fewshot": 0, "stderr": 0.01,
         "baselines": {"chance": 0.25}, "source": "lm-evaluation-harness 0.4.13"},
        EvaluationResult(task="boolq", metric="acc", value=0.5618, num_fewshot=0,
                         baselines={"chance": 0.5, "majority": 0.622}),
    ]
    training = {"datasets": ["HuggingFaceFW/fineweb-edu"], "steps": 22000, "sequence_length": 1024}
    card = render_model_card(config, training=training, evaluation=evaluation, base_preset="decoder_114m",
                             license="apache-2.0", language="en", repo_id="someone/ssa-114m")
    data = card.data
    assert data.library_name == "transformers" and data.pipeline_tag == "text-generation"
    assert {"ssa-hf", "scaled-signed-averaging", "ssa-attention"} <= set(data.tags)
    assert data.datasets == ["HuggingFaceFW/fineweb-edu"] and data.license == "apache-2.0"
    assert data.ssa_hf["base_preset"] == "decoder_114m" and data.ssa_hf["parameters"] == 114_133_260
    assert data.ssa_hf["scoring"]["ssa_b_init"] == 0.8
    assert {(r.task_name, r.metric_type, r.metric_value) for r in data.eval_results} == {
        ("arc_easy", "acc_norm", 0.5387), ("boolq", "acc", 0.5618)}
    text = card.text
    assert "someone/ssa-114m" in text and "trust_remote_code=True" in text and "import ssa_hf" in text
    assert "majority 0.622" in text and "| steps | 22000 |" in text
    assert "Naim, Omar" in text and "2508.14685" in text
    assert "114,133,260" in text
    # the card survives a save / load cycle and the offline validation
    reloaded = ModelCard(str(card))
    assert reloaded.data.to_dict() == data.to_dict()
    validate_model_card(reloaded)


def test_card_reads_trained_scoring_values(tmp_path):
    config = load_model_config("tiny_llama")
    model = build_model(config)
    with torch.no_grad():
        for i, layer in enumerate(model.model.layers):
            layer.self_attn.scoring.params["n"].raw.add_(0.3 * (i + 1))
    folder = save_checkpoint_folder(model, tmp_path / "ckpt", tiny_tokenizer(), base_preset="tiny_llama",
                                    training={"datasets": ["local/toy"], "steps": 3})
    stored = read_scoring_parameters(folder)
    assert set(stored) == set(model.scoring_parameters())
    for name, values in model.scoring_parameters().items():
        assert stored[name]["n"] == pytest.approx(values["n"], rel=1e-6)
        assert stored[name]["b"] == pytest.approx(values["b"], rel=1e-6)
    card = ModelCard.load(folder / "README.md")
    first_n = model.scoring_parameters()["model.layers.0.self_attn.scoring"]["n"][0]
    assert f"{first_n:.4g}" in card.text and card.data.model_name == "ckpt"
    assert json.loads((folder / "ssa_hf_card.json").read_text())["base_preset"] == "tiny_llama"
    with pytest.raises(FileExistsError):
        save_checkpoint_folder(model, folder)
    save_checkpoint_folder(model, folder, overwrite=True, card=False)
    assert not (folder / "README.md").exists() and (folder / "model.safetensors").is_file()


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace("pipeline_tag: fill-mask", "pipeline_tag: [a, b]"), "pipeline_tag"),
    (lambda t: t.replace("tags:\n- ssa-hf\n", "tags:\n- 17\n"), "tags"),
    (lambda t: t.replace("model_name: ssa_bert-ssa", "model_name: x\nmodel-index: [{name: x, results: [{}]}]"),
     "rejected by huggingface_hub.*model_index"),
    (lambda t: t.replace("## Citation", "## Cite"), "missing sections"),
    (lambda t: t.replace("---\n", "", 1), "no YAML metadata header"),
    (lambda t: t.replace("library_name: transformers", "library_name: transformers\nbase_model: not a repo id!"),
     "base_model"),
])
def test_validation_catches_broken_cards(edit, message):
    text = str(render_model_card(load_model_config("tiny_bert")))
    validate_model_card(text)
    assert edit(text) != text
    with pytest.raises(ValueError, match=message):
        validate_model_card(edit(text))


def test_card_for_masked_lm_and_softmax():
    card = render_model_card(load_model_config("babyberta", attention_scoring="softmax"))
    assert card.data.pipeline_tag == "fill-mask" and "softmax-attention" in card.data.tags
    assert "scaled-signed-averaging" not in card.data.tags and "AutoModelForMaskedLM" in card.text
    assert "No evaluation results were given" in card.text


# ------------------------------------------------------------------------------------------------- pushing


@pytest.fixture
def ssa_checkpoint(converted, tmp_path):
    """A copy of the converted SSA Llama folder with extra files a training run leaves behind."""
    import shutil

    folder = tmp_path / "ckpt"
    shutil.copytree(converted["llama", "ssa"][0], folder)
    (folder / "checkpoint-10").mkdir()
    (folder / "checkpoint-10" / "optimizer.pt").write_bytes(b"0")
    (folder / ".ckpt.tmp-abc").write_text("partial")
    return folder


@pytest.fixture
def hub_recorder(monkeypatch):
    """Replace the Hub's network calls by recorders; everything else in push runs for real."""
    import huggingface_hub
    from huggingface_hub import HfApi, constants
    from huggingface_hub.repocard import RepoCard

    calls = []

    def create_repo(self, repo_id, **kwargs):
        calls.append(("create_repo", repo_id, kwargs))
        return f"https://huggingface.co/{repo_id}"

    def upload_folder(self, **kwargs):
        from huggingface_hub.utils import filter_repo_objects

        folder = Path(kwargs["folder_path"])
        files = [p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()]
        kept = sorted(filter_repo_objects(files, ignore_patterns=kwargs["ignore_patterns"]))
        calls.append(("upload_folder", kwargs, {f: (folder / f).read_bytes() for f in kept}))
        return f"https://huggingface.co/{kwargs['repo_id']}/commit/abc123"

    def validate(self, repo_type=None):
        calls.append(("validate", str(self)))

    monkeypatch.setattr(HfApi, "create_repo", create_repo)
    monkeypatch.setattr(HfApi, "upload_folder", upload_folder)
    monkeypatch.setattr(RepoCard, "validate", validate)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_TOKEN", SECRET)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: os.environ.get("HF_TOKEN"))
    return calls


def test_push_uploads_folder_and_card(ssa_checkpoint, hub_recorder, capfd):
    evaluation = ssa_checkpoint / "eval.json"
    evaluation.write_text(json.dumps(LM_EVAL_JSON))
    rc = cli(["-v", "push", str(ssa_checkpoint), "someone/tiny-ssa", "--private", "--evaluation", str(evaluation),
              "--base-preset", "tiny_llama"])
    captured = capfd.readouterr()
    assert rc == 0, captured.err
    assert SECRET not in captured.out + captured.err
    names = [c[0] for c in hub_recorder]
    assert names == ["validate", "create_repo", "upload_folder"]
    assert hub_recorder[1][1] == "someone/tiny-ssa" and hub_recorder[1][2]["private"] is True
    kwargs, uploaded = hub_recorder[2][1], hub_recorder[2][2]
    assert kwargs["repo_id"] == "someone/tiny-ssa" and Path(kwargs["folder_path"]) == ssa_checkpoint
    assert {"config.json", "model.safetensors", "README.md", "modeling_ssa_llama.py", "scoring.py",
            "tokenizer.json"} <= set(uploaded)
    assert not any(n.startswith(("checkpoint-", ".")) for n in uploaded)
    card = ModelCard(uploaded["README.md"].decode())
    assert 'from_pretrained("someone/tiny-ssa"' in card.text
    assert card.data.ssa_hf["base_preset"] == "tiny_llama"
    assert {r.task_name for r in card.data.eval_results} == {"arc_easy", "boolq"}
    assert "## Conversion" in card.text  # the inputs of the first rendering (convert) are kept
    assert "uploaded" in captured.out and "someone/tiny-ssa" in captured.out


def test_push_error_never_shows_the_token(ssa_checkpoint, hub_recorder, monkeypatch, capfd):
    from huggingface_hub import HfApi

    def failing_upload(self, **kwargs):
        raise RuntimeError(f"401 Unauthorized for token {SECRET}")

    monkeypatch.setattr(HfApi, "upload_folder", failing_upload)
    rc = cli(["push", str(ssa_checkpoint), "someone/tiny-ssa", "--no-validate-online"])
    captured = capfd.readouterr()
    assert rc == 1 and "401 Unauthorized" in captured.err
    assert SECRET not in captured.out + captured.err


def test_push_dry_run_contacts_nothing(ssa_checkpoint, hub_recorder, capsys):
    result = push_to_hub(ssa_checkpoint, "someone/tiny-ssa", dry_run=True, refresh_card=True)
    assert hub_recorder == []
    assert result.dry_run and result.card_rendered and "README.md" in result.files
    assert "checkpoint-10/optimizer.pt" not in result.files


def test_push_refusals(sources, ssa_checkpoint, hub_recorder, monkeypatch):
    import huggingface_hub
    from huggingface_hub import constants

    with pytest.raises(ValueError, match="not an ssa-hf model.*ssa-hf convert"):
        push_to_hub(sources["llama"][0], "someone/x")
    with pytest.raises(ValueError, match="not a Hub repository id"):
        push_to_hub(ssa_checkpoint, "bad id with spaces")
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    with pytest.raises(ValueError, match="no Hugging Face token"):
        push_to_hub(ssa_checkpoint, "someone/x")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ValueError, match="HF_HUB_OFFLINE"):
        push_to_hub(ssa_checkpoint, "someone/x")
    (ssa_checkpoint / "scoring.py").unlink()
    with pytest.raises(ValueError, match="lacks scoring.py"):
        push_to_hub(ssa_checkpoint, "someone/x", dry_run=True)
    assert hub_recorder == []


class _HubHTTPError(Exception):
    def __init__(self, status: int, text: str):
        super().__init__(text)
        self.response = type("Response", (), {"status_code": status})()


class ConnectError(Exception):  # named as httpx's
    pass


@pytest.mark.parametrize(
    "failure, expected",
    [
        (_HubHTTPError(403, f"403 Forbidden: you cannot write to someone (token {SECRET})"),
         r"HTTP 403: 403 Forbidden.*\*\*\*.*write access to someone"),
        (_HubHTTPError(401, "401 Unauthorized"), r"HTTP 401.*hf auth login"),
        (ConnectError("[Errno -3] Temporary failure in name resolution"), "could not reach the Hub"),
        ("card", r"rejected the model card.*--no-validate-online"),
    ],
)
def test_a_failed_push_says_what_to_do_and_changes_nothing(ssa_checkpoint, hub_recorder, monkeypatch, capfd,
                                                           failure, expected):
    """--refresh-card renders README.md anew, but a push that fails puts the folder back as it was."""
    from huggingface_hub import HfApi
    from huggingface_hub.repocard import RepoCard

    def fail(*args, **kwargs):
        raise ValueError("metadata: 'license' is not valid") if failure == "card" else failure

    monkeypatch.setattr(*((RepoCard, "validate", fail) if failure == "card" else (HfApi, "upload_folder", fail)))
    before = {name: (ssa_checkpoint / name).read_bytes() for name in ("README.md", "ssa_hf_card.json")}
    rc = cli(["push", str(ssa_checkpoint), "someone/tiny-ssa", "--refresh-card", "--license", "mit"])
    err = capfd.readouterr().err
    assert rc == 1 and SECRET not in err
    assert re.search(expected, err) and "The local folder is unchanged" in err, err
    assert {name: (ssa_checkpoint / name).read_bytes() for name in before} == before


def test_a_push_refused_before_the_hub_changes_nothing(ssa_checkpoint, hub_recorder, monkeypatch, capfd):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    monkeypatch.delenv("HF_TOKEN")
    readme = (ssa_checkpoint / "README.md").read_bytes()
    assert cli(["push", str(ssa_checkpoint), "someone/tiny-ssa", "--refresh-card"]) == 2
    assert "no Hugging Face token" in capfd.readouterr().err
    assert (ssa_checkpoint / "README.md").read_bytes() == readme and hub_recorder == []
