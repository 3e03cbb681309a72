"""`convert_checkpoint(src, dst, attention_scoring="ssa")`: a stock checkpoint folder (Llama, RoBERTa, BERT,
GPT-2: the family table's `stock_sources`) or an ssa-hf one turned into its ssa-hf twin with another scoring
function. The weights are copied (mapped for BERT), the scoring parameters initialised from the config, the outputs
checked against the source's, and the folder written atomically with the tokenizer, a record and a card."""

from __future__ import annotations

import copy
import logging
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from ..models.families import FAMILIES, FamilySpec, source_families
from ..presets import check_config_fields, config_field_names
from ..reporting import atomic_folder, atomic_write_json, check_replaceable, refuse_overlap
from ..models.settings import OLD_NAMES
from ..regular_files import check_model_folder
from .cards import SCORING_FIELDS, card_template, scoring_settings, write_model_card
from .folders import check_loaded_weights, read_config_json, safe_weights_kwargs
from .matched import INITS, MATCHED_B, check_matched_request, matched_settings, matched_tolerance

logger = logging.getLogger("ssa_hf.hub")

CONVERSION_FILE = "ssa_conversion.json"
# Files that make a checkpoint's tokenizer (copied by `convert_checkpoint`).
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "vocab.json",
    "vocab.txt", "merges.txt", "tokenizer.model", "spiece.model", "sentencepiece.bpe.model", "chat_template.jinja",
    "chat_template.json",
)
# config.json keys that describe the source checkpoint, not the model
_NOT_CARRIED = {"model_type", "architectures", "auto_map", "transformers_version", "_name_or_path", "dtype",
                "torch_dtype"}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ConversionError(ValueError):
    """A checkpoint that cannot be converted, or a conversion whose check failed."""


@dataclass
class ConversionResult:
    source: str
    destination: str
    source_class: str
    target_class: str
    attention_scoring: str | list[str]
    scoring_settings: dict[str, Any]
    dtype: str
    copied_tensors: int
    initialised_tensors: list[str]
    dropped_tensors: list[str]
    tokenizer_files: list[str]
    output_check: dict[str, Any]
    # how the scoring parameters were initialised: {"method": "config"} or {"method": "matched", "b": .., "n": ..}
    init: dict[str, Any] = field(default_factory=lambda: {"method": "config"})

    def to_dict(self) -> dict:
        return asdict(self)


def _source_dtype(raw: dict) -> str:
    value = raw.get("dtype") or raw.get("torch_dtype")
    return value if value in DTYPES else "float32"


def _bert_to_roberta_fields(source_config, task: str) -> dict:
    if getattr(source_config, "is_decoder", False) or getattr(source_config, "add_cross_attention", False):
        raise ConversionError("BERT checkpoint is configured as a decoder (is_decoder/add_cross_attention); "
                              "only BERT encoders convert to SSABert")
    position_type = getattr(source_config, "position_embedding_type", "absolute")
    if position_type not in (None, "absolute"):
        raise ConversionError(f"BERT position_embedding_type={position_type!r}: only absolute positions map to "
                              f"SSABert (RoBERTa-style)")
    if task == "masked_lm" and source_config.hidden_act != "gelu":
        raise ConversionError(f"BERT hidden_act={source_config.hidden_act!r}: the RoBERTa masked-LM head of SSABert "
                              f"always applies exact GELU, so only hidden_act='gelu' converts exactly")
    pad = source_config.pad_token_id
    if pad is None:
        raise ConversionError("BERT config has no pad_token_id; RoBERTa-style positions are numbered from "
                              "pad_token_id + 1, so set it in the source config.json")
    fields = source_config.to_dict()
    # RoBERTa numbers positions pad+1, pad+2, ... (pad tokens get position pad); BERT numbers them 0, 1, ...
    fields["max_position_embeddings"] = source_config.max_position_embeddings + pad + 1
    return fields


def _map_bert_state_dict(state: dict[str, torch.Tensor], pad: int) -> dict[str, torch.Tensor]:
    renames = (("bert.", "roberta."), ("cls.predictions.transform.dense.", "lm_head.dense."),
               ("cls.predictions.transform.LayerNorm.", "lm_head.layer_norm."),
               ("cls.predictions.decoder.", "lm_head.decoder."), ("cls.predictions.bias", "lm_head.bias"))
    out = {}
    for key, tensor in state.items():
        new = key
        for old_prefix, new_prefix in renames:
            if key.startswith(old_prefix):
                new = new_prefix + key[len(old_prefix):]
                break
        if new.endswith("embeddings.position_embeddings.weight"):
            shifted = tensor.new_zeros(tensor.shape[0] + pad + 1, tensor.shape[1])
            shifted[pad + 1:] = tensor  # BERT's position i is RoBERTa's position pad + 1 + i
            tensor = shifted
        out[new] = tensor
    return out


def _check_inputs(config, spec: FamilySpec, generator: torch.Generator) -> dict[str, torch.Tensor]:
    # positions numbered from pad + 1 (RoBERTa): a pad token inside the sequence would shift them
    special = {config.pad_token_id} if spec.positions_after_pad and config.pad_token_id is not None else set()
    allowed = torch.tensor([i for i in range(min(config.vocab_size, 4096)) if i not in special])
    # one sequence: sequence-classification heads without a pad token refuse batches larger than one
    ids = allowed[torch.randint(len(allowed), (1, 16), generator=generator)]
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def _main_output(output) -> torch.Tensor:
    for name in ("logits", "last_hidden_state"):
        value = getattr(output, name, None)
        if value is not None:
            return value
    raise ConversionError("the model returned neither logits nor last_hidden_state")



@dataclass(frozen=True)
class SourceAdapter:
    """What a stock checkpoint needs beyond loading its weights by name: its config fields and weights mapped onto
    the family's (BERT -> RoBERTa numbering of positions)."""

    fields: Callable[[Any, str], dict]
    state: Callable[[dict[str, torch.Tensor], Any], dict[str, torch.Tensor]]


# model_type -> adapter; every other source of the family table keeps its config fields and weight names
SOURCE_ADAPTERS = {"bert": SourceAdapter(fields=_bert_to_roberta_fields,
                                         state=lambda state, config: _map_bert_state_dict(state, config.pad_token_id))}


@dataclass
class _Source:
    """A checkpoint to convert: its config.json, model_type, architecture, task, target family and loaded model."""

    raw: dict
    model_type: str
    architecture: str
    task: str
    spec: FamilySpec
    model: Any = None
    dropped: list = field(default_factory=list)  # its tensors of modules the architecture does not have

    @property
    def is_ssa(self) -> bool:
        return self.model_type in FAMILIES


def _check_request(src: Path, dst: Path, dtype: str, overwrite: bool, scoring_kwargs: dict) -> None:
    if not src.is_dir():
        raise FileNotFoundError(f"source checkpoint folder {str(src)!r} "
                                f"{'is a file, not a folder' if src.exists() else 'does not exist'}")
    refuse_overlap(dst, [src])  # (SRC inside DST too: replacing DST would delete the source)
    check_replaceable(dst, overwrite, CONVERSION_FILE)  # (a link, or a folder convert did not write: refused)
    if dtype != "auto" and dtype not in DTYPES:
        raise ValueError(f"dtype must be 'auto' or one of {list(DTYPES)}, got {dtype!r}")
    unknown = sorted(set(scoring_kwargs) - SCORING_FIELDS - set(OLD_NAMES))  # old names (ssa_granularity) still work
    if unknown:
        raise ValueError(f"convert changes only the attention scoring; {unknown} are not scoring settings "
                         f"(allowed: {sorted(SCORING_FIELDS - {'attention_scoring'})})")


def _read_source(src: Path) -> _Source:
    """The source's model_type and architecture, checked against the family table, and the model loaded."""
    import transformers

    check_model_folder(src)  # (a FIFO, a JSON list, sizes < 1: one line, before transformers reads them)
    raw = read_config_json(src)
    model_type = raw.get("model_type")
    sources = source_families()
    if model_type not in sources:
        raise ConversionError(f"{src}: model_type {model_type!r} cannot be converted; supported: "
                              f"{sorted(sources)} (Llama, RoBERTa, BERT, GPT-2 and ssa-hf checkpoints)")
    spec, architectures = sources[model_type]
    found = raw.get("architectures") or []
    if len(found) != 1 or found[0] not in architectures:
        raise ConversionError(f"{src}: architectures {found} is not supported for {model_type}; "
                              f"supported: {sorted(architectures)}")
    source = _Source(raw, model_type, found[0], architectures[found[0]], spec)
    safe = safe_weights_kwargs(src, flag=None)  # a pickle (pytorch_model.bin) is never opened
    if not any(src.glob("*.safetensors")):
        raise ConversionError(f"{src}: holds a config.json but no weights (model.safetensors, or shards with their "
                              f"model.safetensors.index.json); copy the weight files into it")
    if source.is_ssa:
        source.model, info = spec.model_class(source.task).from_pretrained(
            src, dtype=torch.float32, output_loading_info=True, **safe)
    else:
        source.model, info = getattr(transformers, source.architecture).from_pretrained(
            src, dtype=torch.float32, attn_implementation="eager", output_loading_info=True, **safe)
    source.model.eval()
    source.dropped = _check_source_weights(source, src, info)
    check_loaded_weights(source.model, src, offer_flags=False)  # non-finite weights are never converted
    return source


def _check_source_weights(source: _Source, src: Path, info: dict) -> list[str]:
    """Refuse a source whose weight files do not match its own config (transformers would fill a missing tensor
    with random values, and the output check, run against the source as loaded, could not see it); return the
    tensors of modules the architecture does not have (BERT's pooler and next-sentence head in a masked-LM
    checkpoint), which are left out, as transformers does."""
    missing = sorted(k for k in info.get("missing_keys", ()) if not (source.is_ssa and ".scoring." in f".{k}"))
    mismatched = sorted(str(k) for k in info.get("mismatched_keys", ()))
    unexpected = sorted(info.get("unexpected_keys", ()))
    inside = [k for k in unexpected if _inside_the_model(source.model, k)]
    if missing or mismatched or inside:
        found = "; ".join(f"{what} {keys[:6]}" + (f" (+{len(keys) - 6})" if len(keys) > 6 else "")
                          for what, keys in (("missing", missing), ("of other shapes", mismatched),
                                             ("not in its config", inside)) if keys)
        raise ConversionError(f"{src}: its weight files do not match its config.json ({source.architecture}): "
                              f"{found}. Converting it would start those weights from random values or lose "
                              f"them: give a complete, consistent checkpoint (save_pretrained of the model)")
    outside = sorted(set(unexpected) - set(inside))
    if outside:
        logger.warning("%s: %d tensors of modules %s has no place for are left out: %s", src, len(outside),
                       source.architecture, outside[:6])
    return outside


def _inside_the_model(model, key: str) -> bool:
    """Whether an unexpected key names a place inside the model's own modules: a layer past the config's count (an
    index of a module list) or a tensor of an existing module. False for a module the model does not have."""
    module, parts = model, key.split(".")
    for name in parts[:-1]:
        child = module._modules.get(name)
        if child is None:
            return isinstance(module, (torch.nn.ModuleList, torch.nn.ModuleDict, torch.nn.Sequential))
        module = child
    return True


def _target_config(source: _Source, src: Path, attention_scoring, scoring_kwargs: dict):
    adapter = SOURCE_ADAPTERS.get(source.model_type)
    fields = adapter.fields(source.model.config, source.task) if adapter else source.model.config.to_dict()
    target_config_class = source.spec.config_class
    known = config_field_names(target_config_class)
    fields = {k: v for k, v in fields.items() if k in known and k not in _NOT_CARRIED}
    previous = {k: fields.get(k) for k in SCORING_FIELDS}
    fields.update(scoring_kwargs)
    fields["attention_scoring"] = attention_scoring
    check_config_fields(target_config_class, scoring_kwargs, where="convert")
    try:
        target_config = target_config_class(**fields)
    except (TypeError, ValueError) as error:
        raise ConversionError(f"cannot build {target_config_class.__name__}: {error}") from None
    if source.is_ssa and all(previous[k] == getattr(target_config, k) for k in SCORING_FIELDS):
        raise ConversionError(f"{src} already uses attention_scoring={attention_scoring!r} with these settings; "
                              f"nothing to convert")
    return target_config


def _copy_weights(source: _Source, target) -> tuple[dict, list[str], list[str]]:
    """Load the source's weights into the target: (the state copied, the target's missing keys, dropped keys)."""
    state = source.model.state_dict()
    dropped = []
    if source.is_ssa:
        dropped = sorted(k for k in state if ".scoring." in f".{k}")
        state = {k: v for k, v in state.items() if k not in dropped}
    adapter = SOURCE_ADAPTERS.get(source.model_type)
    if adapter:
        state = adapter.state(state, source.model.config)
    missing, unexpected = target.load_state_dict(state, strict=False)
    not_scoring = [k for k in missing if ".scoring." not in f".{k}"]
    if unexpected or not_scoring:
        raise ConversionError(f"weights of {source.architecture} do not map onto {type(target).__name__}: "
                              f"unexpected {unexpected[:8]}, missing {not_scoring[:8]}")
    return state, missing, dropped


def _output_check(source: _Source, target, matched: bool = False) -> dict[str, Any]:
    """Run both models on a random batch: a softmax target of a softmax source must reproduce its outputs, and so
    must a softmax-matched SSA target (`matched`), within `matched.MATCHED_TOLERANCE`."""
    generator = torch.Generator().manual_seed(0)
    inputs = _check_inputs(target.config, source.spec, generator)
    with torch.no_grad():
        reference = _main_output(source.model(**inputs)).float()
        converted = _main_output(target(**inputs)).float()
    diff = float((reference - converted).abs().max())
    scale = float(reference.abs().max())
    source_softmax = not source.is_ssa or source.model.config.uses_softmax_only
    must_match = source_softmax and target.config.uses_softmax_only
    tolerance = 1e-4 * max(1.0, scale)
    if matched:
        must_match, tolerance = True, matched_tolerance(scale)
        if not diff <= tolerance:
            raise ConversionError(f"the softmax-matched SSA model's outputs differ from the source's by {diff:.3g} "
                                  f"(tolerance {tolerance:.3g}): its attention scores are too large for b = "
                                  f"{target.config.ssa_b_init:g}; pass a smaller matched_b (--matched-b, >= 1e-4)")
    if must_match and not diff <= tolerance:
        raise ConversionError(f"the converted softmax model's outputs differ from the source's by {diff:.3g} "
                              f"(tolerance {tolerance:.3g}): the weights did not map correctly")
    logger.debug("output check: max |difference| to the source %.3g (%s)", diff,
                 "softmax-matched SSA" if matched else "must match" if must_match else
                 "scoring changed, differences expected")
    return {"performed": True, "max_abs_diff": diff, "reference_max_abs": scale,
            "must_match": must_match, "tolerance": tolerance if must_match else None}


def _refuse_link_out(src: Path, path: Path) -> None:
    """A file of the source that is a link out of it is not copied (the copy would be a plain file holding, say, a
    token, published by a later push); links into the blobs of a Hub cache snapshot are how the cache stores files."""
    if not path.is_symlink():
        return
    root, target = src.resolve(), Path(os.path.realpath(path))
    blobs = root.parent.parent / "blobs" if root.parent.name == "snapshots" else None
    if not (target.is_relative_to(root) or (blobs is not None and target.is_relative_to(blobs))):
        raise ConversionError(f"{path} is a link to {target}, outside the source folder; copy the file in "
                              f"(or remove the link) if it belongs to the checkpoint")


def _write_converted(target, src: Path, dst: Path, result: ConversionResult, *, overwrite: bool, card: bool,
                     base_model: str | None, license: str | None) -> None:
    """The converted model, tokenizer files, conversion record and card, appearing at `dst` at once."""
    with atomic_folder(dst, overwrite=overwrite, sources=[src], owner_file=CONVERSION_FILE) as tmp:
        target.save_pretrained(tmp)
        for name in TOKENIZER_FILES:
            if (src / name).is_file():
                _refuse_link_out(src, src / name)
                shutil.copy2(src / name, tmp / name)
                result.tokenizer_files.append(name)
        # the record travels with the checkpoint (also to the Hub): the source by folder name, not local path
        record = {k: v for k, v in result.to_dict().items() if k != "destination"}
        record["source"] = src.name
        atomic_write_json(tmp / CONVERSION_FILE, record)
        if card:
            summary = dict(record)
            summary["initialised_tensors"] = len(result.initialised_tensors)
            check = result.output_check
            summary["output_check"] = (f"max abs difference of outputs to the source {check['max_abs_diff']:.3g}"
                                       if check.get("performed") else "not run")
            if check.get("performed") and result.init["method"] == "matched":
                summary["output_check"] += (f" (tolerance {check['tolerance']:.3g} = {check['tolerance_rule']}, "
                                            f"float32, {check['inputs']})")
            write_model_card(tmp, default_name=dst.name, conversion=summary, base_model=base_model, license=license)


def convert_checkpoint(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    attention_scoring: str | list[str] = "ssa",
    *,
    dtype: str = "auto",
    overwrite: bool = False,
    check_outputs: bool = True,
    card: bool = True,
    base_model: str | None = None,
    license: str | None = None,
    init: str = "config",
    matched_b: float | None = None,
    **scoring_kwargs,
) -> ConversionResult:
    """Convert a checkpoint folder to its ssa-hf twin with `attention_scoring` (and the ssa_* settings in
    `scoring_kwargs`, e.g. ssa_n_init=2.0, ssa_learn_n=False).

    Sources (the family table's `stock_sources`): LlamaForCausalLM / LlamaModel / LlamaForSequenceClassification ->
    SSALlama*; RobertaForMaskedLM / RobertaModel / RobertaForSequenceClassification -> SSABert*; BertForMaskedLM /
    BertModel -> SSABert* (position embeddings shifted to RoBERTa's numbering, which starts at pad_token_id + 1;
    exact for unpadded and right-padded inputs); GPT2LMHeadModel / GPT2Model / GPT2ForSequenceClassification ->
    SSAGPT2*; ssa-hf checkpoints (changes the scoring function). Every weight is copied; the only weights not found
    in the source are the scoring parameters, initialised from the config. With `check_outputs`, both models run
    on a random batch: a softmax target must reproduce the source's outputs. Tokenizer files are copied, a card
    and ssa_conversion.json written; the folder appears atomically.
    `dtype`: "auto" keeps the source's stored dtype, or "float32" / "bfloat16" / "float16".
    `init`: "config" (the scoring parameters from the config and `scoring_kwargs`) or "matched": SSA that starts as
    the source's softmax, b = `matched_b` (default `matched.MATCHED_B`) and n = 1 / b, its outputs checked against
    the source's within `matched.MATCHED_TOLERANCE` (see ssa_hf/hub/matched.py and docs/uptraining.md).
    """
    # DST is never resolved: a link there is refused (by the checks below), not followed
    src, dst = Path(src).resolve(), Path(os.path.abspath(dst))
    _check_request(src, dst, dtype, overwrite, scoring_kwargs)
    init_record = _init_settings(init, matched_b, attention_scoring, scoring_kwargs, check_outputs)
    if init == "matched":
        scoring_kwargs = {**scoring_kwargs, **matched_settings(init_record["b"])}
    if card:
        card_template()  # the card is written last: a missing template fails before any work
    source = _read_source(src)
    if init == "matched" and source.is_ssa and not source.model.config.uses_softmax_only:
        raise ConversionError(f"{src} does not use softmax (attention_scoring={source.model.config.attention_scoring!r}); "
                              "init='matched' starts SSA where a softmax source was: convert a softmax checkpoint")
    target_config = _target_config(source, src, attention_scoring, scoring_kwargs)
    target = source.spec.model_class(source.task)(target_config)
    target.eval()
    state, missing, dropped = _copy_weights(source, target)
    output_check = _output_check(source, target, matched=init == "matched") if check_outputs else {"performed": False}
    if init == "matched":
        output_check.update(tolerance_rule="1e-2 x max(1, max |source logits|)",
                            inputs="one random sequence of 16 tokens")

    save_dtype = _source_dtype(source.raw) if dtype == "auto" else dtype
    target.to(DTYPES[save_dtype])
    if getattr(source.model, "generation_config", None) is not None and target.can_generate():
        target.generation_config = copy.deepcopy(source.model.generation_config)
    result = ConversionResult(
        source=str(src), destination=str(dst), source_class=source.architecture, target_class=type(target).__name__,
        attention_scoring=attention_scoring, scoring_settings=scoring_settings(target_config), dtype=save_dtype,
        copied_tensors=len(state), initialised_tensors=sorted(missing), dropped_tensors=sorted(dropped + source.dropped),
        tokenizer_files=[],
        output_check=output_check, init=init_record,
    )
    _write_converted(target, src, dst, result, overwrite=overwrite, card=card, base_model=base_model,
                     license=license)
    return result


def _init_settings(init: str, matched_b, attention_scoring, scoring_kwargs: dict, check_outputs: bool) -> dict:
    """The record of how the scoring parameters start; checks a matched-init request."""
    if init not in INITS:
        raise ValueError(f"init must be one of {INITS}, got {init!r}")
    if init == "config":
        if matched_b is not None:
            raise ValueError("matched_b applies to init='matched' only; pass init='matched' (--init matched)")
        return {"method": "config"}
    check_matched_request(attention_scoring, scoring_kwargs)
    if not check_outputs:
        raise ValueError("init='matched' promises outputs within a tolerance of the source's, so the output check "
                         "must run; drop check_outputs=False (--no-check)")
    settings = matched_settings(MATCHED_B if matched_b is None else matched_b)
    return {"method": "matched", "b": settings["ssa_b_init"], "n": settings["ssa_n_init"],
            "c": settings["ssa_b_init"] * settings["ssa_n_init"]}


__all__ = ["ConversionError", "ConversionResult", "convert_checkpoint"]
