"""`ssa-hf demo`: attention collapse under softmax vs SSA, in numbers and a plot."""


def run(args) -> int:
    from ..demo import run_demo

    result = run_demo(output_dir=args.output_dir)
    print(result["table"])
    if result.get("plot"):
        print(f"\nwrote {args.output_dir}/demo.json, demo.md and demo.png")
    else:
        print(f"\nwrote {args.output_dir}/demo.json and demo.md (no plot: matplotlib is not installed; "
              'pip install "ssa-hf[icl]" adds it)')
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser("demo", help="attention collapse under softmax vs SSA, in numbers and a plot")
    parser.add_argument("--output-dir", default="outputs/demo", help="folder for demo.json, demo.md, demo.png (default: outputs/demo)")
    parser.set_defaults(func=run)
