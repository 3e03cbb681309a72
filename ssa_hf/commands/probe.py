"""`ssa-hf probe`: Zorro grammar probes (23 paradigms of minimal pairs) on a masked or causal LM."""

from __future__ import annotations

from . import add_command, config_from_args

# the optional part of the install this command needs (ssa_hf.extras; checked before it runs)
EXTRA = "eval"
SUMMARY = ("Zorro grammar probes: masked LMs by holistic scoring and pseudo-log-likelihood, causal LMs by "
           "log-likelihood")


def run(args) -> int:
    from ..cli import show_progress
    from ..evaluation.config import ProbeConfig
    from ..evaluation.zorro import run_probe

    config = config_from_args(ProbeConfig, args, model=args.model)
    config.output_dir = config.output_dir or "outputs/probe"
    results = run_probe(config, progress=show_progress(args))
    from ..evaluation.report import zorro_markdown

    print(zorro_markdown([results.to_dict()]))
    print(f"\nwrote {config.output_dir}/probe.json, probe.md, probe.png")
    return 0


def register(subparsers) -> None:
    from ..evaluation.config import ProbeConfig

    parser = add_command(subparsers, "probe", run, SUMMARY, config=ProbeConfig, skip=("model",), progress=True)
    parser.add_argument("model", metavar="MODEL", help="checkpoint folder or Hub id")
