"""`ssa-hf convert`: turn a Llama, RoBERTa, BERT or GPT-2 checkpoint folder into its SSA twin."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from . import add_command, config_from_args

SUMMARY = "turn a Llama / RoBERTa / BERT / GPT-2 checkpoint folder (or an ssa-hf one) into its SSA twin"
DESCRIPTION = ("Copy every weight of SRC into an ssa-hf model with the chosen attention scoring (the scoring "
               "parameters are initialised from the config), check the outputs, and write DST atomically "
               "with the tokenizer files and a model card.")


@dataclass
class ConvertOptions:
    """The options of `ssa-hf convert` (arguments of `ssa_hf.hub.convert_checkpoint`).

    attention_scoring: scoring function (ssa, softmax, ...; a comma-separated list gives one per head).
    dtype: dtype of the saved weights (auto: the source's).
    overwrite: replace DST if it exists.
    check: run both models on a random batch and compare their outputs (--no-check skips it).
    base_model: Hub id of the source model, recorded as base_model in the card.
    license: license id for the card metadata (e.g. apache-2.0).
    """

    attention_scoring: str = "ssa"
    dtype: str = field(default="auto", metadata={"choices": ("auto", "float32", "bfloat16", "float16")})
    overwrite: bool = False
    check: bool = True
    base_model: str | None = None
    license: str | None = None


def run(args) -> int:
    from ..hub import convert_checkpoint
    from ..presets import parse_overrides

    options = dataclasses.asdict(config_from_args(ConvertOptions, args))
    if Path(args.dst).exists() and not options["overwrite"]:  # (the library's own message names its argument)
        raise ValueError(f"{args.dst} already exists; remove it or pass --overwrite")
    scoring = options.pop("attention_scoring")
    if "," in scoring:
        scoring = [name.strip() for name in scoring.split(",")]
    result = convert_checkpoint(args.src, args.dst, scoring, check_outputs=options.pop("check"), **options,
                                **parse_overrides(args.set))
    check = result.output_check
    print(f"converted {result.source_class} -> {result.target_class} (attention_scoring={result.attention_scoring!r}, "
          f"dtype {result.dtype})")
    print(f"copied {result.copied_tensors} tensors; initialised {len(result.initialised_tensors)} scoring tensors "
          f"from the config" + (f"; dropped {len(result.dropped_tensors)} old scoring tensors" if result.dropped_tensors else ""))
    if check.get("performed"):
        verdict = "matches the source" if check["must_match"] else "scoring changed, so outputs differ"
        print(f"output check: max |difference| to the source {check['max_abs_diff']:.3g} ({verdict})")
    if result.tokenizer_files:
        print(f"tokenizer files copied: {', '.join(result.tokenizer_files)}")
    print(f"wrote {result.destination} (model card README.md, ssa_conversion.json)")
    return 0


def register(subparsers) -> None:
    parser = add_command(subparsers, "convert", run, SUMMARY, DESCRIPTION, config=ConvertOptions, config_file=False,
                         positionals={"src": "source checkpoint folder (config.json + weights)",
                                      "dst": "destination folder (must not exist unless --overwrite)"})
    parser.add_argument("--set", action="append", metavar="KEY=VALUE",
                        help="a scoring setting, e.g. --set ssa_n_init=2 --set ssa_learn_n=false (repeatable)")
