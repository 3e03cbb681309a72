"""`ssa-hf eval`: lm-evaluation-harness (zero-shot by default) on checkpoints, on local data or the Hub."""

from __future__ import annotations

from . import add_command, config_from_args

# the optional part of the install this command needs (ssa_hf.extras; checked before it runs)
EXTRA = "eval"
SUMMARY = "lm-evaluation-harness (zero-shot) on checkpoints: acc/acc_norm with chance and majority baselines"
DESCRIPTION = ("Run lm-evaluation-harness on one or more checkpoint folders or Hub ids (several: side by side). "
               "With --data-dir the stock task definitions read local files (offline).")


def _write_tasks(config, folder: str, tasks: list[str] | None) -> None:
    from ..evaluation.config import DEFAULT_TASKS
    from ..evaluation.lm_tasks import write_local_tasks

    if not config.data_dir:
        raise ValueError("--write-tasks needs --data-dir (the local data the tasks read)")
    folder = write_local_tasks(config.data_dir, folder, tasks)
    print(f"wrote local lm-eval tasks to {folder}; run them with:\n"
          f"  lm_eval --model hf --model_args pretrained=DIR,trust_remote_code=True --device cpu "
          f"--include_path {folder} --tasks {','.join(tasks or DEFAULT_TASKS)}")


def run(args) -> int:
    from ..evaluation.config import DEFAULT_TASKS, EvalConfig
    from ..evaluation.harness import run_eval_models

    config = config_from_args(EvalConfig, args)
    tasks = getattr(args, "tasks", None)  # given on the command line (else: every local task / the default set)
    if args.baselines:
        from ..evaluation.harness import task_baselines

        out = config.output_dir or "outputs/eval"
        task_baselines(tasks or DEFAULT_TASKS, config.data_dir, config.limit, out)
        print(open(f"{out}/baselines.md").read())
        return 0
    if args.write_tasks:
        _write_tasks(config, args.write_tasks, tasks)
        if not args.models:
            return 0
    if not args.models:
        raise ValueError("give MODEL (a checkpoint folder or a Hub id)")
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
    from ..evaluation.config import EvalConfig

    parser = add_command(subparsers, "eval", run, SUMMARY, DESCRIPTION, config=EvalConfig, skip=("model", "name"))
    parser.add_argument("models", nargs="*", metavar="MODEL", help="checkpoint folder(s) or Hub id(s)")
    parser.add_argument("--names", help="comma-separated display names, one per MODEL")
    parser.add_argument("--write-tasks", metavar="DIR", help="write the local task YAMLs for --data-dir into DIR "
                        "(for lm_eval --include_path DIR); with no MODEL, only that")
    parser.add_argument("--baselines", action="store_true", help="only the chance and majority baselines of the tasks "
                        "(from their documents, no model): baselines.json, baselines.md")
