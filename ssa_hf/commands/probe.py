"""`ssa-hf probe`: Zorro grammar probes (23 paradigms of minimal pairs) on a masked or causal LM."""

from __future__ import annotations

from . import add_config_arguments, config_from_args


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

    parser = subparsers.add_parser(
        "probe",
        help="Zorro grammar probes: masked LMs by holistic scoring and pseudo-log-likelihood, causal LMs by log-likelihood",
    )
    parser.add_argument("model", metavar="MODEL", help="checkpoint folder or Hub id")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars (they show on a terminal only)")
    add_config_arguments(parser, ProbeConfig, skip=("model",))
    parser.set_defaults(func=run)
