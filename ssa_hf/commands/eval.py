"""`ssa-hf eval`: lm-evaluation-harness (zero-shot by default) on checkpoints, on local data or the Hub."""

from __future__ import annotations


def _limit(text: str) -> int | float:
    value = float(text)
    return int(value) if value >= 1 and value.is_integer() else value


def run(args) -> int:
    from ..evaluation._config import load_config
    from ..evaluation.harness import DEFAULT_TASKS, EvalConfig, run_eval_models
    from ..evaluation.lm_tasks import write_local_tasks

    tasks = [t for t in (args.tasks or "").split(",") if t] or None
    if args.baselines:
        from ..evaluation.harness import task_baselines

        out = args.output_dir or "outputs/eval"
        task_baselines(tasks or DEFAULT_TASKS, args.data_dir, args.limit, out)
        print(open(f"{out}/baselines.md").read())
        return 0
    if args.write_tasks:
        if not args.data_dir:
            raise ValueError("--write-tasks needs --data-dir (the local data the tasks read)")
        folder = write_local_tasks(args.data_dir, args.write_tasks, tasks)
        print(f"wrote local lm-eval tasks to {folder}; run them with:\n"
              f"  lm_eval --model hf --model_args pretrained=DIR,trust_remote_code=True --device cpu "
              f"--include_path {folder} --tasks {','.join(tasks or DEFAULT_TASKS)}")
        if not args.models:
            return 0
    if not args.models:
        raise ValueError("give MODEL (a checkpoint folder or a Hub id)")
    overrides = dict(
        tasks=tasks,
        data_dir=args.data_dir,
        limit=args.limit,
        num_fewshot=args.num_fewshot,
        batch_size=args.batch_size,
        device=args.device,
        threads=args.threads,
        tokenizer=args.tokenizer,
        dtype=args.dtype,
        attn_implementation=args.attn_implementation,
        trust_remote_code=args.trust_remote_code or None,
        seed=args.seed,
        output_dir=args.output_dir,
        log_samples=args.log_samples or None,
    )
    config = load_config(EvalConfig, args.config, **overrides)
    config.output_dir = config.output_dir or "outputs/eval"
    names = [n for n in args.names.split(",")] if args.names else None
    from ..cli import summarised_warnings

    # lm-eval warns once per document whose context it cuts to fit the model; one line with the count says as much
    with summarised_warnings("lm_eval.models.huggingface", ("Truncating", "Left truncation applied"),
                             "lm-eval cut the context of %d requests from the left to fit the model's maximum "
                             "length: those documents were scored on the end of their context only"):
        results = run_eval_models(config, list(args.models), names)
    from ..evaluation.report import lm_eval_markdown

    print(lm_eval_markdown([r.to_dict() for r in results]))
    if len(results) == 1:
        print(f"\nwrote {config.output_dir}/eval.json, eval.md, eval.png")
    else:
        print(f"\nwrote {config.output_dir}/<name>/eval.json for each model, and eval.md, eval.png, "
              "eval_comparison.json side by side")
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "eval",
        help="lm-evaluation-harness (zero-shot) on checkpoints: acc/acc_norm with chance and majority baselines",
        description="Run lm-evaluation-harness on one or more checkpoint folders or Hub ids (several: side by side). "
        "With --data-dir the stock task definitions read local files (offline).",
    )
    parser.add_argument("models", nargs="*", metavar="MODEL", help="checkpoint folder(s) or Hub id(s)")
    parser.add_argument("--tasks", help="comma-separated lm-eval tasks (default arc_easy,arc_challenge,boolq,hellaswag; "
                        "with --data-dir: arc_easy, arc_challenge, boolq, hellaswag, piqa)")
    parser.add_argument("--data-dir", help="local data in the layout of ../shared/data (else the Hub)")
    parser.add_argument("--limit", type=_limit, help="documents per task: a count, or a fraction < 1 (default all)")
    parser.add_argument("--num-fewshot", type=int, help="few-shot examples (default 0: zero-shot)")
    parser.add_argument("--batch-size", type=int, help="batch size of the model calls (default 16)")
    parser.add_argument("--tokenizer", help="tokenizer folder or Hub id (default: the model's own)")
    parser.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's; 1 is much faster on a "
                        "busy shared machine)")
    parser.add_argument("--device", help="cpu, cuda, cuda:1, ... (default: cuda if available, else cpu)")
    parser.add_argument("--dtype", help="auto (the checkpoint's), float32, bfloat16, ... (default auto)")
    parser.add_argument("--attn-implementation", help="ssa_auto (default), ssa_eager, ssa_flex, ssa_blockwise")
    parser.add_argument("--trust-remote-code", action="store_true", help="allow a checkpoint's own modeling code")
    parser.add_argument("--seed", type=int, help="lm-eval's seeds (default 1234)")
    parser.add_argument("--names", help="comma-separated display names, one per MODEL")
    parser.add_argument("--log-samples", action="store_true", help="also write every scored document (eval_samples.json)")
    parser.add_argument("--config", help="YAML file of EvalConfig fields (command-line options win)")
    parser.add_argument("--write-tasks", metavar="DIR", help="write the local task YAMLs for --data-dir into DIR "
                        "(for lm_eval --include_path DIR); with no MODEL, only that")
    parser.add_argument("--baselines", action="store_true", help="only the chance and majority baselines of the tasks "
                        "(from their documents, no model): baselines.json, baselines.md")
    parser.add_argument("--output-dir", help="(default outputs/eval) folder for eval.json, eval.md (default outputs/eval)")
    parser.set_defaults(func=run)
