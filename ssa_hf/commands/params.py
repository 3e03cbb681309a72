"""`ssa-hf params`: the shape and parameter count of model presets (configs/models/)."""


def run(args) -> int:
    from ..presets import list_presets, parameter_table, parse_overrides

    names = args.presets or list_presets()
    print(parameter_table(names, task=args.task, **parse_overrides(args.set)))
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "params", help="print model presets' shapes and parameter counts",
        description="Print each preset's class, layers, hidden size, heads, key-value heads, vocabulary and "
                    "parameter count (built on the meta device: no memory for weights, tied weights counted once).")
    parser.add_argument("presets", nargs="*", metavar="PRESET",
                        help="preset names in configs/models/ or YAML paths (default: all presets)")
    parser.add_argument("--task", choices=["causal_lm", "masked_lm", "base", "sequence_classification"],
                        help="model head (default: causal_lm for ssa_llama, masked_lm for ssa_bert)")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE",
                        help="override a config field for every preset, e.g. --set vocab_size=32000 (repeatable)")
    parser.set_defaults(func=run)
