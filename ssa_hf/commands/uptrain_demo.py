"""`ssa-hf uptrain-demo`: a softmax decoder pretrained, converted to SSA with the softmax-matched init, and trained on
beside a softmax control (paired by seed), with the step-0 check, the b and n trajectories and a plot."""

from __future__ import annotations

from . import add_command, config_from_args
from ..train.uptrain_demo import UptrainDemoConfig

# the optional part of the install this command needs (ssa_hf.extras; checked before it runs)
EXTRA = "train"
SUMMARY = "uptraining end to end on the CPU: softmax source -> matched SSA -> trained beside a softmax control"


def run(args) -> int:
    from ..train.uptrain_demo import run_uptrain_demo

    result = run_uptrain_demo(config_from_args(UptrainDemoConfig, args), output_dir=args.output_dir)
    with open(f"{args.output_dir}/uptrain_demo.md", encoding="utf-8") as handle:
        print(handle.read())
    print(f"wrote {args.output_dir}/uptrain_demo.json, uptrain_demo.md and uptrain_demo.png (runs under {args.output_dir})")
    return 0


def register(subparsers) -> None:
    parser = add_command(subparsers, "uptrain-demo", run, SUMMARY, config=UptrainDemoConfig)
    parser.add_argument("--output-dir", default="outputs/uptrain_demo", help="folder for the results and the runs")
