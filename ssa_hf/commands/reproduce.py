"""`ssa-hf reproduce`: every claim of the paper at a stated scale, written to RESULTS.md."""

# the optional part of the install this command needs (ssa_hf.extras; checked before it runs)
EXTRA = "experiments"
SUMMARY = "run the paper's claims at a stated scale (cpu: docs/reproduce.md gives its time) and write RESULTS.md"


def _config(args):
    """The config this call runs: the scale's (or --config), the command line's overrides, a rehearsal's shrinking."""
    from pathlib import Path

    from ..reproduce import load_config, scale_config_path
    from ..reproduce.config import SCALE_FILES

    path = args.config or str(scale_config_path(args.scale))
    shown = args.config or SCALE_FILES[args.scale]  # as the docs name it, wherever the shipped copy lives
    config = load_config(path)
    if args.rehearse:
        from ..reproduce.rehearsal import rehearsal_config, write_rehearsal_data

        data = Path(args.data_dir) if args.data_dir else write_rehearsal_data(Path(args.output_dir) / "rehearsal_data")
        config = rehearsal_config(config, data, args.rehearse)
        shown = f"{shown} (rehearsal, {args.rehearse})"
    elif args.data_dir:
        config.data_dir = args.data_dir
    if args.workers is not None:
        config.workers = args.workers
    if args.devices:
        config.devices = [d for d in args.devices.split(",") if d]
        if args.workers is None:
            config.workers = len(config.devices)
    if args.no_launch:
        config.launch = None
    elif args.accelerate_config or args.num_processes:
        launch = dict(config.launch or {"config_file": "configs/accelerate/multi_gpu.yaml", "num_processes": None,
                                        "kinds": None})
        if args.accelerate_config:
            launch["config_file"] = args.accelerate_config
        if args.num_processes:
            launch["num_processes"] = args.num_processes
        config.launch = launch
    config.validate()  # (--workers 0 is refused, not ignored)
    return config, shown


def run(args) -> int:
    import shlex
    import sys

    from ..reproduce import plan, run_reproduce
    from ..reproduce.checks import preflight
    from ..reproduce.pipeline import emit_commands, launch_lines
    from ..reproduce.runs import data_dir_env

    config, shown = _config(args)
    if args.emit_commands:
        written = emit_commands(config, args.output_dir, args.emit_commands, args.confirmatory_only)
        print(f"wrote {written['count']} commands (one per run) and a SLURM array script:")
        print("\n".join(f"  {f}" for f in written["files"]))
        return 0
    if args.plan or (config.scale == "paper" and not args.execute and not args.unit and not args.report_only):
        print(f"plan of {shown} (scale {config.scale}):")
        print("\n".join(f"  {line}" for line in launch_lines(config) + plan(config)))
        with data_dir_env(config.data_dir):
            lines, problems = preflight(config, raise_errors=False)
        print("checked before any run:")
        print("\n".join(f"  ok: {line}" for line in lines))
        if problems:
            print("\n".join(f"  PROBLEM: {line}" for line in problems))
            print(f"{len(problems)} problem(s): the run would stop before its first step")
            if any("does not exist" in p or "no local copy" in p or "not a folder" in p for p in problems):
                print("missing data: build the data folder once with `ssa-hf data download --to DIR`, then pass "
                      "--data-dir DIR or set SSA_HF_DATA_DIR=DIR (docs/data.md)")
        if config.scale == "paper" and not args.execute:
            print("this is the GPU scale: add --execute to run it (or --rehearse to rehearse it on the CPU)")
        return 1 if problems else 0
    command = "ssa-hf " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:2] == ["reproduce"] else "ssa-hf reproduce"
    summary = run_reproduce(config, args.output_dir, command=command, config_path=shown, results_file=args.results_file,
                            report_only=args.report_only, confirmatory_only=args.confirmatory_only, note=args.note,
                            units=args.unit)
    if args.unit:
        print(f"finished {len(summary['units'])} run(s): {', '.join(args.unit)} (RESULTS.md: --report-only)")
        return 0
    for claim in summary["claims"]:
        primary = claim["rows"][0]
        c = primary["comparison"]
        print(f"{claim['id']}: {primary['verdict']} (SSA - control {c['mean_difference']:+.4g}, p = {primary['p']:.3g}, "
              f"{len(primary['seed_list'])} confirmatory seeds)")
    if summary["pending"]:
        print(f"not finished: {', '.join(summary['pending'])} (run the same command again to resume)")
    print(f"wrote {args.output_dir}/RESULTS.md" + (f" and {args.results_file}" if args.results_file else ""))
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("reproduce", help=SUMMARY, description=SUMMARY + ". A second call on the same "
                              "--output-dir reuses finished runs and resumes interrupted ones.")
    p.add_argument("--scale", choices=["cpu", "paper"], default="cpu",
                   help="cpu: configs/experiments/reproduce_cpu.yaml; paper: reproduce_paper.yaml (GPU; prints the plan)")
    p.add_argument("--config", help="a YAML file (configs/experiments/*.yaml); replaces --scale")
    p.add_argument("--output-dir", default="outputs/reproduce", help="folder for runs, results.json and RESULTS.md (default: outputs/reproduce)")
    p.add_argument("--results-file", help="also write RESULTS.md here (e.g. docs/results.md)")
    p.add_argument("--data-dir", help="local data in the layout of ../shared/data (default: $SSA_HF_DATA_DIR)")
    p.add_argument("--rehearse", nargs="?", const="small", choices=["small", "tiny"],
                   help="run the scale's whole code path at toy sizes on made-up data written into --output-dir "
                        "(small: minutes on 2 CPU cores, trainings through accelerate launch over 2 processes; tiny: "
                        "the smallest, in one process); its figures mean nothing")
    p.add_argument("--workers", type=int, help="runs at a time, each in its own process (default: the config's; with "
                   "--devices: one per device)")
    p.add_argument("--devices", help="comma-separated devices the workers take, one each: cuda:0,cuda:1,... or cpu")
    p.add_argument("--accelerate-config", help="train each language model with `accelerate launch` and this config "
                   "(configs/accelerate/multi_gpu.yaml: DDP over a node's GPUs; fsdp.yaml: FSDP)")
    p.add_argument("--num-processes", type=int, help="processes per `accelerate launch` (default: every visible GPU)")
    p.add_argument("--no-launch", action="store_true", help="train each language model in its worker's process")
    p.add_argument("--emit-commands", metavar="DIR", help="write one command per run (DIR/commands.txt), a SLURM job "
                   "array script and report.sh (--report-only) instead of running")
    p.add_argument("--unit", action="append", help="run only this run (as --emit-commands names it; repeatable)")
    p.add_argument("--report-only", action="store_true",
                   help="run nothing: write RESULTS.md from the runs that finished earlier in --output-dir")
    p.add_argument("--confirmatory-only", action="store_true",
                   help="run only the confirmatory seeds (those that decide the verdicts), not the exploratory ones")
    p.add_argument("--note", help="a sentence for RESULTS.md's header (how and where the runs were made)")
    p.add_argument("--plan", action="store_true", help="print the runs, declared endpoints and the checks of every "
                   "setting, run nothing (exit 1 when a setting cannot run)")
    p.add_argument("--execute", action="store_true", help="with --scale paper: run it (a GPU job) instead of printing the plan")
    p.set_defaults(func=run)
