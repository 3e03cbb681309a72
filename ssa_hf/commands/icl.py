"""`ssa-hf icl`: the paper's in-context-learning experiments (train, evaluate under shift, report).

The options come from the config dataclasses (`ssa_hf.icl.config`, through `ssa_hf.options`): every key is an
option (`--train.lr`, `--eval.seed`, ...), with the short names of `SHORTCUTS` (`--steps`, `--layers`, ...)."""

from . import add_command

# the optional part of the install this command needs (ssa_hf.extras; checked before it runs)
EXTRA = "icl"
SUMMARY = "the paper's in-context-learning experiments: softmax vs SSA under distribution shift"
NON_CONFIG = ("preset", "config", "output_dir", "no_progress", "strict", "func", "command", "verbose")


def config_from_args(args):
    """The ICLConfig of the command line: a preset (or --config FILE), then the options given on top."""
    from ..icl.config import config_from_dict, load_config, preset
    from ..options import dotted_to_nested, options_given

    base = load_config(args.config) if getattr(args, "config", None) else preset(args.preset)
    return config_from_dict(dotted_to_nested(options_given(args, exclude=NON_CONFIG)), base=base)


def run(args) -> int:
    from ..cli import show_progress
    from ..icl.pipeline import run_icl

    config = config_from_args(args)
    results = run_icl(config, args.output_dir, progress=show_progress(args))
    print(f"wrote {results.files['results']}, {results.files['report']} and {len(results.files.get('plots', []))} plots "
          f"in {results.seconds / 60:.1f} min")
    failed = results.failed_runs()
    if failed:
        print(f"runs that did not learn the rule in distribution: {', '.join(failed)}")
        return 1 if args.strict else 0
    return 0


def register(subparsers) -> None:
    from ..icl.config import SHORTCUTS, ICLConfig
    from ..options import add_dataclass_arguments

    p = add_command(subparsers, "icl", run, SUMMARY, SUMMARY + ". Options override the preset (or --config); lists "
                    "are comma- or space-separated (--tasks every,some).", progress=True)
    p.add_argument("--preset", default="quick", help="quick (CPU, minutes) or paper (the paper's budget, for a GPU)")
    p.add_argument("--config", help="a YAML file (configs/icl/*.yaml); replaces --preset")
    p.add_argument("--output-dir", default="outputs/icl", help="folder for results.json, report.md, plots and runs/")
    p.add_argument("--strict", action="store_true", help="exit 1 when a run fails the in-distribution check")
    add_dataclass_arguments(p, ICLConfig, shortcuts=SHORTCUTS)
