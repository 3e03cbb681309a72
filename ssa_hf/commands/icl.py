"""`ssa-hf icl`: the paper's in-context-learning experiments (train, evaluate under shift, report)."""

SUMMARY = "the paper's in-context-learning experiments: softmax vs SSA under distribution shift"


def _list(kind):
    return lambda text: [kind(v) for v in text.split(",") if v.strip()]


def run(args) -> int:
    from ..cli import show_progress
    from ..icl.pipeline import run_icl
    from ..icl.cli_options import config_from_args

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
    p = subparsers.add_parser("icl", help=SUMMARY, description=SUMMARY + ". Options override the preset (or --config).")
    p.add_argument("--preset", default="quick", help="quick (CPU, minutes) or paper (the paper's budget, for a GPU)")
    p.add_argument("--config", help="a YAML file (configs/icl/*.yaml); replaces --preset")
    p.add_argument("--output-dir", default="outputs/icl", help="folder for results.json, report.md, plots and runs/")
    p.add_argument("--tasks", type=_list(str), help="comma-separated: every,some,linear")
    p.add_argument("--scoring", type=_list(str), help="comma-separated scoring functions, e.g. softmax,ssa,ssmax")
    p.add_argument("--seeds", type=_list(int), help="comma-separated seeds, e.g. 0,1,2")
    p.add_argument("--layers", type=int)
    p.add_argument("--heads", type=int)
    p.add_argument("--width", type=int)
    p.add_argument("--attention-only", action="store_true", default=None, help="drop the MLP blocks")
    p.add_argument("--backbone", choices=["llama", "gpt2"],
                   help="llama (RoPE, RMSNorm, SwiGLU, slot flag; quick preset) or gpt2 (the paper's: learned "
                        "positions, LayerNorm, GELU; paper preset)")
    p.add_argument("--steps", type=int, help="training steps per run")
    p.add_argument("--batch-size", type=int)
    p.add_argument("--lr", type=float)
    p.add_argument("--sigmas", type=_list(float), help="sigma grid of the quantifier tasks")
    p.add_argument("--lengths", type=_list(int), help="prompt-length grid (points) of the quantifier tasks")
    p.add_argument("--linear-sigmas", type=_list(float), help="sigma_x and sigma_ab grid of the linear task")
    p.add_argument("--eval-batches", type=int, help="batches of test prompts per grid cell")
    p.add_argument("--linear-protocol", choices=["standard", "paper"],
                   help="linear test: standard (one line per prompt) or paper (100 lines x the same 64 inputs, 9 points)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"])
    p.add_argument("--threads", type=int, help="torch CPU threads per run")
    p.add_argument("--workers", type=int, help="runs trained in parallel processes (CPU)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars (they show on a terminal only)")
    p.add_argument("--strict", action="store_true", help="exit 1 when a run fails the in-distribution check")
    p.set_defaults(func=run)
