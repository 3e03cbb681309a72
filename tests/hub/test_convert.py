"""ssa_hf.hub.convert: stock checkpoints converted to SSA or softmax, refusals, atomicity, the convert command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from huggingface_hub import ModelCard
from safetensors import safe_open

import ssa_hf
from ssa_hf.cli import main as cli
from ssa_hf.hub import ConversionError, convert_checkpoint, read_scoring_parameters

from .helpers import VOCAB, SOURCES, make_bert, inputs_for, load_converted


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


def _edit_weights(src, dst, edit):
    """A copy of checkpoint folder src whose weight file is rewritten by edit(state) (a damaged checkpoint)."""
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    state = load_file(dst / "model.safetensors")
    edit(state)
    save_file(state, dst / "model.safetensors", metadata={"format": "pt"})
    return dst


def _drop(key):
    return lambda state: state.pop(key)


def _add(key, like):
    return lambda state: state.__setitem__(key, torch.zeros_like(state[like]))


DAMAGED = {  # weight files that do not match their config.json: transformers would fill or ignore the difference
    "llama missing tensor": ("llama", _drop("model.layers.0.mlp.down_proj.weight"), "missing .*down_proj"),
    "gpt2 missing tensor": ("gpt2", _drop("transformer.h.1.attn.c_attn.weight"), "missing .*c_attn"),
    "roberta missing tensor": ("roberta", _drop("roberta.encoder.layer.0.attention.self.query.weight"), "missing .*query"),
    "llama layer past its config": ("llama", _add("model.layers.2.mlp.up_proj.weight", "model.layers.1.mlp.up_proj.weight"),
                                    "not in its config .*layers.2"),
    "llama bias its config lacks": ("llama", _add("model.layers.0.self_attn.q_proj.bias", "model.norm.weight"),
                                    "not in its config .*q_proj.bias"),
}


@pytest.mark.parametrize("case", list(DAMAGED))
def test_damaged_source_is_refused(case, sources, tmp_path):
    kind, edit, message = DAMAGED[case]
    damaged = _edit_weights(sources[kind][0], tmp_path / "damaged", edit)
    with pytest.raises(ConversionError, match="weight files do not match its config.json.*" + message):
        convert_checkpoint(damaged, tmp_path / "out", "ssa")
    assert not (tmp_path / "out").exists()


def test_tensors_of_modules_the_architecture_lacks_are_left_out_and_recorded(sources, tmp_path):
    """A masked-LM checkpoint saved with BERT's pooler and next-sentence head (as bert-base-uncased is) converts;
    those tensors are listed as dropped, every tensor the model has is copied."""
    pooler = ["bert.pooler.dense.weight", "bert.pooler.dense.bias", "cls.seq_relationship.weight"]

    def add_heads(state):
        state[pooler[0]] = torch.ones(32, 32)
        state[pooler[1]] = torch.ones(32)
        state[pooler[2]] = torch.ones(2, 32)

    with_heads = _edit_weights(sources["bert"][0], tmp_path / "bert_heads", add_heads)
    result = convert_checkpoint(with_heads, tmp_path / "out", "softmax")
    assert set(pooler) <= set(result.dropped_tensors) and result.initialised_tensors == []
    assert json.loads((tmp_path / "out" / "ssa_conversion.json").read_text())["dropped_tensors"] == result.dropped_tensors


def test_a_folder_without_weights_is_refused(sources, tmp_path, capsys):
    folder = tmp_path / "config_only"
    folder.mkdir()
    (folder / "config.json").write_text((sources["llama"][0] / "config.json").read_text())
    assert cli(["convert", str(folder), str(tmp_path / "out")]) == 2
    assert "holds a config.json but no weights" in capsys.readouterr().err


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


def test_a_source_file_linked_out_of_the_source_is_not_copied(sources, tmp_path):
    """A tokenizer file that links out (to a token, say) would become a plain file of the converted folder, which a
    later push publishes; a Hub cache snapshot's links into its blobs are allowed."""
    import shutil

    source = tmp_path / "source"
    shutil.copytree(sources["llama"][0], source)
    secret = tmp_path / "token"
    secret.write_text("hf_secret")
    (source / "tokenizer.model").symlink_to(secret)
    with pytest.raises(ConversionError, match="tokenizer.model is a link to .*outside the source folder"):
        convert_checkpoint(source, tmp_path / "out", "ssa")
    assert not (tmp_path / "out").exists()
    cache = tmp_path / "models--x" / "snapshots" / "abc"
    blobs = tmp_path / "models--x" / "blobs"
    shutil.copytree(sources["llama"][0], cache)
    blobs.mkdir()
    (cache / "tokenizer.json").rename(blobs / "b1")
    (cache / "tokenizer.json").symlink_to(blobs / "b1")
    convert_checkpoint(cache, tmp_path / "out2", "ssa")
    assert (tmp_path / "out2" / "tokenizer.json").read_bytes() == (blobs / "b1").read_bytes()
