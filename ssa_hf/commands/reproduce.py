"""`ssa-hf reproduce`: every claim of the paper at a stated scale, written to RESULTS.md."""

# the optional part of the install this command needs (ssa_hf.extras; checked before it runs)
EXTRA = "experiments"
SUMMARY = "run the paper's claims at a stated scale (cpu: docs/reproduce.md gives its time) and write RESULTS.md"


def run(args) -> int:
    import shlex
    import sys

    from ..reproduce import load_config, plan, run_reproduce, scale_config_path
    from ..reproduce.config import SCALE_FILES

    path = args.config or str(scale_config_path(args.scale))
    shown = args.config or SCALE_FILES[args.scale]  # as the docs name it, wherever the shipped copy lives
    config = load_config(path)
    if args.data_dir:
        config.data_dir = args.data_dir
    if args.workers is not None:
        config.workers = args.workers
        config.validate()  # (--workers 0 is refused, not ignored)
    if args.plan or (config.scale == "paper" and not args.execute):
        print(f"plan of {shown} (scale {config.scale}):")
        print("\n".join(f"  {line}" for line in plan(config)))
        if config.scale == "paper" and not args.execute:
            print("this is the GPU scale: add --execute to run it")
        return 0
    command = "ssa-hf " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:2] == ["reproduce"] else "ssa-hf reproduce"
    summary = run_reproduce(config, args.output_dir, command=command, config_path=shown, results_file=args.results_file,
                            report_only=args.report_only, confirmatory_only=args.confirmatory_only, note=args.note)
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
    p.add_argument("--workers", type=int, help="runs in parallel processes (default: the config's)")
    p.add_argument("--report-only", action="store_true",
                   help="run nothing: write RESULTS.md from the runs that finished earlier in --output-dir")
    p.add_argument("--confirmatory-only", action="store_true",
                   help="run only the confirmatory seeds (those that decide the verdicts), not the exploratory ones")
    p.add_argument("--note", help="a sentence for RESULTS.md's header (how and where the runs were made)")
    p.add_argument("--plan", action="store_true", help="print the runs and declared endpoints, run nothing")
    p.add_argument("--execute", action="store_true", help="with --scale paper: run it (a GPU job) instead of printing the plan")
    p.set_defaults(func=run)
