"""Shared runners over the family table x scoring functions (row-wise, linear attention, mixtures): forward and
backward, save/load, remote code, padding, chunked prefill and decoding, generate, attention maps, refusals.
torch.compile and torch.export are in test_compile.py. Trainer, pipelines, gradient checkpointing and the other
behaviours tools expect of transformers classes are in test_transformers_behaviour.py."""

import copy
import dataclasses
import json
import subprocess
import sys
import textwrap

import pytest
import torch
import transformers
from transformers import (
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DynamicCache,
)

from ssa_hf.models.scoring import get_scoring_function

from .tiny import (
    CAUSAL_FAMILIES,
    FAMILIES_UNDER_TEST,
    TINY_CONFIGS,
    auto_class,
    bert_config,
    build,
    is_causal,
    llama_config,
    spec,
    tiny_config,
    tiny_tokenizer,
)

# row-wise (with and without parameters, normalised or not), linear attention, and two mixtures of heads: one
# with a name repeated (ssa), one mixing linear attention with row-wise functions
SCORINGS = {
    "ssa": "ssa", "softmax": "softmax", "temperature": "temperature", "sigmoid": "sigmoid", "linear": "linear",
    "cosformer": "cosformer", "mixture": ["ssa", "softmax", "ssa", "sparsemax"],
    "mixture-linear": ["linear", "softmax", "cosformer", "ssa"],
}
CASES = [(family, s) for family in FAMILIES_UNDER_TEST for s in SCORINGS.values()]
IDS = [f"{f}-{name}" for f in FAMILIES_UNDER_TEST for name in SCORINGS]
CAUSAL_CASES = [(family, s) for family, s in CASES if is_causal(family)]
CAUSAL_IDS = [i for (family, _), i in zip(CASES, IDS) if is_causal(family)]
QUERY_WEIGHTS = ("q_proj.weight", "query.weight", "attn.c_attn.weight")  # GPT-2: the fused [q | k | v] projection


def batch_for(model, length=11, left_pad=None):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, model.config.vocab_size, (3, length), generator=g)
    mask = torch.ones_like(ids)
    left_pad = model.can_generate() if left_pad is None else left_pad  # causal LMs: left padding
    if left_pad:
        mask[0, :4] = 0
    else:
        mask[0, -4:] = 0
    ids = ids.masked_fill(mask == 0, model.config.pad_token_id)
    return ids, mask


def positions(mask):
    return (mask.cumsum(-1) - 1).clamp_min(0)


def forward(model, ids, mask, **kw):
    if model.can_generate():  # causal LMs are left-padded: positions from the mask
        kw.setdefault("position_ids", positions(mask))
    return model(input_ids=ids, attention_mask=mask, **kw)


@pytest.mark.parametrize("family,scoring", CASES, ids=IDS)
def test_forward_backward_and_parameter_gradients(family, scoring):
    model = build(family, scoring).train()
    ids, mask = batch_for(model)
    labels = ids.masked_fill(mask == 0, -100)
    out = forward(model, ids, mask, labels=labels)
    assert torch.isfinite(out.loss)
    out.loss.backward()
    scoring_params = [(n, p) for n, p in model.named_parameters() if ".scoring." in n]
    if scoring == "ssa" or isinstance(scoring, list):
        assert scoring_params, "learnable scoring parameters expected"
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    query_grads = [p.grad for n, p in model.named_parameters() if n.endswith(QUERY_WEIGHTS)]
    assert len(query_grads) == model.config.num_hidden_layers and all(g.abs().sum() > 0 for g in query_grads)
    if scoring_params:
        assert any(p.grad.abs().sum() > 0 for _, p in scoring_params)


@pytest.mark.parametrize("family,scoring", CASES, ids=IDS)
def test_padding_equals_one_by_one(family, scoring):
    model = build(family, scoring)
    ids, mask = batch_for(model)
    with torch.no_grad():
        batched = forward(model, ids, mask).logits
        keep = mask[0].bool()
        alone = forward(model, ids[:1, keep], mask[:1, keep]).logits
    torch.testing.assert_close(batched[0, keep], alone[0], atol=2e-4, rtol=1e-4)


@pytest.mark.parametrize("family,scoring", CASES, ids=IDS)
def test_save_load_roundtrip_keeps_scoring(family, scoring, tmp_path):
    model = build(family, scoring)
    with torch.no_grad():  # move the scoring parameters away from their initial values
        for name, p in model.named_parameters():
            if ".scoring." in name:
                p.add_(torch.rand_like(p))
    ids, mask = batch_for(model)
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["attention_scoring"] == scoring and "auto_map" in config
    assert (tmp_path / "model.safetensors").exists()
    loaded = auto_class(family).from_pretrained(tmp_path).eval()
    assert loaded.config._attn_implementation == "ssa_auto"
    assert loaded.scoring_parameters() == model.scoring_parameters()
    with torch.no_grad():
        torch.testing.assert_close(forward(loaded, ids, mask).logits, forward(model, ids, mask).logits, atol=0, rtol=0)


REMOTE_SCRIPT = textwrap.dedent(
    """
    import json, sys, torch
    sys.modules["ssa_hf"] = None  # ssa-hf must not be importable: the checkpoint alone has to suffice
    import transformers
    from transformers import AutoTokenizer
    cases = json.loads(sys.argv[1])
    # every checkpoint is loaded before any runs: each folder brings its own copy of the code, and each copy
    # registers the ssa_* attention functions with transformers (the last one registered serves all models)
    models = []
    for folder, auto_name, causal in cases:
        model = getattr(transformers, auto_name).from_pretrained(folder, trust_remote_code=True).eval()
        assert "transformers_modules" in type(model).__module__, type(model).__module__
        models.append(model)
    for (folder, auto_name, causal), model in zip(cases, models):
        tok = AutoTokenizer.from_pretrained(folder)
        data = torch.load(folder + "/inputs.pt")
        kw = {"position_ids": data["pos"]} if causal else {}
        with torch.no_grad():
            logits = model(input_ids=data["ids"], attention_mask=data["mask"], **kw).logits
        torch.save({"logits": logits, "impl": model.config._attn_implementation, "vocab": len(tok)}, folder + "/remote.pt")
    """
)


def test_remote_code_loads_without_ssa_hf(tmp_path):
    """Many remote-code checkpoints in one process without ssa_hf, each with its own copy of the code: an SSA
    model and its softmax twin, every family (GPT-2 and a masked model among them) and mixtures, all loaded before
    any runs, each compared with its installed twin."""
    cases = []
    remote_cases = [*((f, "ssa") for f in FAMILIES_UNDER_TEST), ("llama", "softmax"), ("llama", SCORINGS["mixture"]),
                    ("llama", "cosformer"), ("bert", SCORINGS["mixture-linear"])]
    for family, scoring in remote_cases:
        model = build(family, scoring)
        folder = tmp_path / f"{family}-{len(cases)}"
        model.save_pretrained(folder)
        # the CPU kernels travel with the weights: blockwise.py and the C source it compiles (native.py), and
        # linear attention's linear.py
        sources = ("blockwise.py", "native.py", "native_math.py", "native_rows.py", "native_decode.py", "native_tiles.py", "native_kernels.py", "native_ops.py",
                   "linear.py")
        assert all((folder / name).is_file() for name in sources)
        tiny_tokenizer(masked=not is_causal(family)).save_pretrained(folder)
        ids, mask = batch_for(model)
        with torch.no_grad():
            logits = forward(model, ids, mask).logits
        torch.save({"ids": ids, "mask": mask, "pos": positions(mask), "logits": logits}, folder / "inputs.pt")
        cases.append((str(folder), auto_class(family).__name__, is_causal(family)))
    env = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "HF_HOME": str(tmp_path / "hf_home")}
    result = subprocess.run([sys.executable, "-c", REMOTE_SCRIPT, json.dumps(cases)], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    for folder, _, _ in cases:
        remote = torch.load(folder + "/remote.pt")
        assert remote["impl"] == "ssa_auto"
        torch.testing.assert_close(remote["logits"], torch.load(folder + "/inputs.pt")["logits"], atol=0, rtol=0)


@pytest.mark.parametrize("family", FAMILIES_UNDER_TEST)
def test_installed_model_runs_beside_a_remote_code_copy(family, tmp_path):
    """With ssa-hf installed: loading a checkpoint's own code registers that copy's ssa_* functions last; models
    of the installed classes (built before and after) still run, with unchanged outputs."""
    import transformers.dynamic_module_utils as dynamic

    from ssa_hf.models import register_with_transformers

    installed = build(family, "ssa")
    ids, mask = batch_for(installed)
    with torch.no_grad():
        before = forward(installed, ids, mask).logits
    twin = tmp_path / f"softmax_twin_{family}"
    build(family, "softmax").save_pretrained(twin)
    try:
        # the checkpoint's own class (the Auto classes prefer the installed one when ssa-hf is imported)
        reference = json.loads((twin / "config.json").read_text())["auto_map"][auto_class(family).__name__]
        remote_class = dynamic.get_class_from_dynamic_module(reference, str(twin))
        assert "transformers_modules" in remote_class.__module__
        remote = remote_class.from_pretrained(twin).eval()
        with torch.no_grad():
            torch.testing.assert_close(forward(installed, ids, mask).logits, before, atol=0, rtol=0)
            forward(remote, ids, mask)
    finally:
        register_with_transformers()  # the installed functions again, for the tests that follow


def _older_copy(monkeypatch, calls):
    """A stand-in for the remote code of a checkpoint saved before `attention_groups` (2026-12-01): a package
    whose scoring module lacks it and whose attention function accepts only its own modules (records its calls)."""
    import types

    package = types.ModuleType("older_ssa_copy")
    scoring_module, attention_module = types.ModuleType("older_ssa_copy.scoring"), types.ModuleType("older_ssa_copy.attention")

    class OlderScoring(torch.nn.Module):
        pass

    OlderScoring.__module__ = scoring_module.__name__

    def make_transformers_attention(backend):
        def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
            if not isinstance(getattr(module, "scoring", None), OlderScoring):
                raise ValueError("module.scoring is not this copy's")
            calls.append(backend)
            return torch.zeros_like(query).transpose(1, 2).contiguous(), None
        return attention

    scoring_module.OlderScoring, attention_module.make_transformers_attention = OlderScoring, make_transformers_attention
    for module in (package, scoring_module, attention_module):
        monkeypatch.setitem(sys.modules, module.__name__, module)
    return OlderScoring, make_transformers_attention


def test_checkpoints_of_an_older_copy_share_the_process(monkeypatch):
    """An older copy's modules run through that copy's function, and the ssa_* functions that copy registers
    (last) are replaced again before this copy's next forward: both run, in either order."""
    from transformers import AttentionInterface
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    from ssa_hf.models import register_with_transformers

    calls = []
    older_scoring, make_older = _older_copy(monkeypatch, calls)
    model = build("llama", "ssa")
    ids, mask = batch_for(model)
    try:
        with torch.no_grad():
            before = forward(model, ids, mask).logits
            AttentionInterface.register("ssa_auto", make_older(None))  # the older copy is loaded after this model
            torch.testing.assert_close(forward(model, ids, mask).logits, before, atol=0, rtol=0)
            assert getattr(ALL_ATTENTION_FUNCTIONS["ssa_auto"], "runs_modules_of_any_copy", False)
            older = build("llama", "ssa")  # a model of the older copy: its layers carry that copy's scoring
            for layer in older.model.layers:
                layer.self_attn.scoring = older_scoring()
            forward(older, ids, mask)
        assert calls == [None] * len(older.model.layers)  # each layer ran by its own copy, on the same backend
        with torch.no_grad():
            torch.testing.assert_close(forward(model, ids, mask).logits, before, atol=0, rtol=0)
    finally:
        register_with_transformers()


@pytest.mark.parametrize("family,scoring", CAUSAL_CASES, ids=CAUSAL_IDS)
def test_chunked_prefill_and_decoding_match_full_forward(family, scoring):
    model = build(family, scoring)
    ids, mask = batch_for(model, length=14)
    with torch.no_grad():
        full = forward(model, ids, mask).logits
        cache = DynamicCache(config=model.config)
        prefill = 6
        out = model(input_ids=ids[:, :prefill], attention_mask=mask[:, :prefill], position_ids=positions(mask)[:, :prefill], cache=cache, use_cache=True)
        steps = [out.logits]
        for t in range(prefill, ids.shape[1]):
            out = model(input_ids=ids[:, t : t + 1], attention_mask=mask[:, : t + 1], position_ids=positions(mask)[:, t : t + 1], cache=cache, use_cache=True)
            steps.append(out.logits)
    incremental = torch.cat(steps, dim=1)
    real = mask.bool()
    torch.testing.assert_close(incremental[real], full[real], atol=2e-4, rtol=1e-4)


@pytest.mark.parametrize("family,scoring", CAUSAL_CASES, ids=CAUSAL_IDS)
def test_generate_greedy_batched_left_padding_equals_individual(family, scoring):
    tok = tiny_tokenizer()
    tok.padding_side = "left"
    model = build(family, scoring)
    prompts = ["the cat sat", "every child likes some toys and"]
    batch = tok(prompts, return_tensors="pt", padding=True)
    with torch.no_grad():
        together = model.generate(**batch, max_new_tokens=6, do_sample=False, pad_token_id=tok.pad_token_id)
        for i, prompt in enumerate(prompts):
            alone = model.generate(**tok([prompt], return_tensors="pt"), max_new_tokens=6, do_sample=False, pad_token_id=tok.pad_token_id)
            assert together[i, -6:].tolist() == alone[0, -6:].tolist()
            # greedy decoding with the cache equals the argmax of a full forward over the generated text
            assert model(input_ids=alone).logits[0, -7:-1].argmax(-1).tolist() == alone[0, -6:].tolist()
        sampled = model.generate(**batch, max_new_tokens=5, do_sample=True, top_k=20, pad_token_id=tok.pad_token_id)
    assert sampled.shape == (2, batch["input_ids"].shape[1] + 5)


def _stock_twin(family, config):
    """The stock transformers model of a family's default head (the family table's stock source), with every field
    the stock config class has copied from `config` (ssa-hf configs subclass the stock ones)."""
    sources = spec(family).stock_sources
    name = next(arch for archs in sources.values() for arch, task in archs.items() if task == spec(family).default_task)
    cls = getattr(transformers, name)
    fields = {f.name for f in dataclasses.fields(cls.config_class)} - {"architectures", "auto_map"}
    return cls(cls.config_class(**{k: getattr(config, k) for k in fields if hasattr(config, k)})).eval()


@pytest.mark.parametrize("family", CAUSAL_FAMILIES)
def test_softmax_model_equals_stock_model(family):
    """With attention_scoring='softmax', our attention path reproduces transformers' own model exactly."""
    model = build(family, "softmax")
    stock = _stock_twin(family, model.config)
    stock.load_state_dict(model.state_dict())
    ids, mask = batch_for(model)
    with torch.no_grad():
        torch.testing.assert_close(forward(model, ids, mask).logits, forward(stock, ids, mask).logits, atol=1e-5, rtol=1e-5)
        # "sdpa" (mapped onto ssa_auto) gives the same result
        model.set_attn_implementation("sdpa")
        torch.testing.assert_close(forward(model, ids, mask).logits, forward(stock, ids, mask).logits, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", FAMILIES_UNDER_TEST)
def test_ssa_model_differs_from_its_softmax_twin(family):
    ssa, softmax = build(family, "ssa"), build(family, "softmax")
    softmax.load_state_dict(ssa.state_dict(), strict=False)
    ids, mask = batch_for(ssa)
    with torch.no_grad():
        assert (forward(ssa, ids, mask).logits - forward(softmax, ids, mask).logits).abs().max() > 1e-2


@pytest.mark.parametrize("edited", ["softmax", ["ssa", "softmax"]], ids=["softmax", "per-head"])
@pytest.mark.parametrize("family", FAMILIES_UNDER_TEST)
def test_attention_scoring_edited_on_a_built_model_is_refused(family, edited, tmp_path):
    """The layers keep the function they were built with: a forward or a save after the field is edited would run
    SSA (or write a config.json naming softmax beside SSA weights) under a config that says otherwise."""
    model = build(family, "ssa")
    ids, mask = batch_for(model)
    with torch.no_grad():
        before = forward(model, ids, mask).logits
    heads = model.config.num_attention_heads
    model.config.attention_scoring = edited if isinstance(edited, str) else (edited * heads)[:heads]
    for attempt in (lambda: forward(model, ids, mask), lambda: model.save_pretrained(tmp_path / "edited")):
        with pytest.raises(ValueError, match="was edited on a built model"):
            attempt()
    assert not (tmp_path / "edited" / "config.json").exists()
    model.config.attention_scoring = "ssa"
    with torch.no_grad():
        assert torch.equal(forward(model, ids, mask).logits, before)


@pytest.mark.parametrize("family", FAMILIES_UNDER_TEST)
def test_scoring_values_edited_through_data_are_used_and_checked(family):
    """An edit through `.data` moves no version counter: the layers' no-grad state compares the values too, so the
    next forward uses the edited b and n (before: the old ones, silently) and refuses invalid ones."""
    model = build(family, "ssa").eval()
    ids, mask = batch_for(model)
    raw = [p for name, p in model.named_parameters() if ".scoring." in name]
    with torch.no_grad():
        forward(model, ids, mask)
        for p in raw:
            p.data.mul_(3).add_(2)
        edited = forward(model, ids, mask).logits
        fresh = build(family, "ssa").eval()
        fresh.load_state_dict(model.state_dict())
        assert torch.equal(edited, forward(fresh, ids, mask).logits)
        for p in raw:
            p.data.fill_(float("nan"))
        with pytest.raises(ValueError, match="not finite"):
            forward(model, ids, mask)
        with pytest.raises(ValueError, match="not finite"):
            model.validate_scoring_parameters()


@pytest.mark.parametrize("family,scoring", CASES, ids=IDS)
def test_attention_maps_with_ssa_eager(family, scoring):
    model = build(family, scoring)
    model.set_attn_implementation("ssa_eager")
    ids, mask = batch_for(model)
    with torch.no_grad():
        maps = forward(model, ids, mask, output_attentions=True).attentions
    assert len(maps) == 2 and maps[0].shape == (3, 4, ids.shape[1], ids.shape[1])
    padded_keys = ~mask[0].bool()
    assert (maps[0][0][..., padded_keys] == 0).all(), "padded keys get exactly zero weight"
    names = [scoring] * 4 if isinstance(scoring, str) else scoring
    sums = maps[0][1].sum(-1)
    for head, name in enumerate(names):
        if name == "cosformer":  # relu features: a query with no positive product with any key gets all-zero weights
            assert (((sums[head] - 1).abs() < 1e-5) | (sums[head] == 0)).all()
        elif get_scoring_function(name).normalised:
            torch.testing.assert_close(sums[head], torch.ones(ids.shape[1]))


@pytest.mark.parametrize("family,scoring", CASES, ids=IDS)
def test_default_implementation_gives_the_maps_of_ssa_eager(family, scoring):
    """output_attentions=True in the call with the default implementation (ssa_auto): the maps of ssa_eager, and
    the outputs of a call without maps."""
    model = build(family, scoring)
    ids, mask = batch_for(model)
    with torch.no_grad():
        out = forward(model, ids, mask, output_attentions=True)
        torch.testing.assert_close(out.logits, forward(model, ids, mask).logits, atol=2e-4, rtol=1e-4)
        model.set_attn_implementation("ssa_eager")
        eager = forward(model, ids, mask, output_attentions=True).attentions
    assert len(out.attentions) == len(eager) == 2
    for got, want in zip(out.attentions, eager):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize(
    "family,scoring,implementation",
    [("llama", "sigmoid", "ssa_flex"), ("bert", "sparsemax", "ssa_blockwise"), ("llama", "sigmoid", "flex_attention"),
     ("bert", "ssa", "paged|eager"), ("llama", "linear", "ssa_flex"), ("llama", "linear", "ssa_blockwise"),
     ("llama", "linear", "flex_attention")],
)
def test_implementation_that_cannot_run_scoring_is_refused(family, scoring, implementation):
    config = llama_config(attention_scoring=scoring) if family == "llama" else bert_config(attention_scoring=scoring)
    auto = AutoModelForCausalLM if family == "llama" else AutoModelForMaskedLM
    with pytest.raises(ValueError, match="cannot run attention_scoring"):
        auto.from_config(copy.deepcopy(config), attn_implementation=implementation)
    model = auto.from_config(config)
    with pytest.raises(ValueError, match="cannot run attention_scoring"):
        model.set_attn_implementation(implementation)
    model.config._attn_implementation_internal = implementation  # edited by hand: caught at forward time
    ids, mask = batch_for(model)
    with pytest.raises(ValueError, match="cannot run attention_scoring"):
        forward(model, ids, mask)


@pytest.mark.parametrize(
    "overrides,field",
    [({"attention_scoring": "softmaxx"}, "attention_scoring"), ({"ssa_b_init": 0.0}, "ssa_b_init"),
     ({"ssa_n_init": 0.9}, "ssa_n_init"), ({"attention_scoring": ["ssa", "softmax"]}, "attention_scoring"),
     ({"scoring_granularity": "row"}, "scoring_granularity"), ({"ssa_granularity": "row"}, "scoring_granularity"),
     ({"attention_scoring": "linearr"}, "attention_scoring"),
     ({"attention_scoring": "cosformer", "cosformer_length": -1}, "cosformer_length")],
)
@pytest.mark.parametrize("family", FAMILIES_UNDER_TEST)
def test_invalid_config_names_the_field(family, overrides, field):
    with pytest.raises(ValueError, match=field):
        tiny_config(family, **overrides)


DROPOUT_FIELD = {"llama": "attention_dropout", "bert": "attention_probs_dropout_prob", "gpt2": "attn_pdrop"}


@pytest.mark.parametrize("value", [-0.1, 1.0, 1.5])
@pytest.mark.parametrize("family", FAMILIES_UNDER_TEST)
def test_attention_dropout_outside_a_probability_is_refused(family, value):
    """-0.1 would train without dropout, 1.0 zero every attention output: refused when the config is built."""
    field = DROPOUT_FIELD[family]
    with pytest.raises(ValueError, match=f"{field} must be a probability in \\[0, 1\\)"):
        tiny_config(family, **{field: value})
    assert getattr(tiny_config(family, **{field: 0.25}), field) == 0.25


def test_every_family_has_a_tiny_config():
    assert set(TINY_CONFIGS) == set(FAMILIES_UNDER_TEST)


@pytest.mark.parametrize("family", FAMILIES_UNDER_TEST)
def test_auto_classes_and_task_heads(family):
    """Every head of the family table loads through its Auto class from the family's config."""
    from ssa_hf.models.families import TASKS

    config = tiny_config(family)
    assert isinstance(config, spec(family).config_class)
    assert type(transformers.AutoConfig.for_model(spec(family).name)) is spec(family).config_class
    for task, cls in spec(family).model_classes.items():
        assert type(TASKS[task].auto_class.from_config(copy.deepcopy(config))) is cls, task
    config.num_labels = 3
    model = AutoModelForSequenceClassification.from_config(config)
    ids = torch.randint(5, config.vocab_size, (2, 7))
    out = model(input_ids=ids, labels=torch.tensor([0, 2]))
    assert out.logits.shape == (2, 3) and torch.isfinite(out.loss)


def test_attention_only_variant_has_no_mlp():
    model = build("llama", "ssa", attention_only=True)
    assert not any(".mlp." in n or "post_attention_layernorm" in n for n, _ in model.named_parameters())
    ids, mask = batch_for(model)
    assert torch.isfinite(forward(model, ids, mask, labels=ids).loss)


@pytest.mark.parametrize("family", FAMILIES_UNDER_TEST)
def test_fully_padded_sequence_gives_finite_outputs(family):
    model = build(family, "ssa")
    ids, mask = batch_for(model)
    mask[1] = 0
    with torch.no_grad():
        assert torch.isfinite(forward(model, ids, mask).logits).all()


@pytest.mark.parametrize("family", FAMILIES_UNDER_TEST)
def test_cosformer_model_refuses_inputs_longer_than_cosformer_length(family):
    model = build(family, "cosformer", cosformer_length=8)
    with pytest.raises(ValueError, match="cosformer_length"):
        model(input_ids=torch.randint(5, 50, (1, 12)))
    assert torch.isfinite(model(input_ids=torch.randint(5, 50, (1, 8))).logits).all()
