"""`ssa-hf probe`: Zorro grammar probes (23 paradigms of minimal pairs) on a masked or causal LM."""

from __future__ import annotations


def run(args) -> int:
    from ..cli import show_progress
    from ..evaluation._config import load_config
    from ..evaluation.zorro import ProbeConfig, run_probe

    overrides = dict(
        model=args.model,
        zorro_dir=args.zorro_dir,
        version=args.version,
        methods=args.methods,
        paradigms=args.paradigms,
        limit=args.limit,
        batch_size=args.batch_size,
        device=args.device,
        threads=args.threads,
        tokenizer=args.tokenizer,
        dtype=args.dtype,
        kind=args.kind,
        attn_implementation=args.attn_implementation,
        trust_remote_code=args.trust_remote_code or None,
        output_dir=args.output_dir,
        name=args.name,
        save_scores=args.save_scores or None,
    )
    config = load_config(ProbeConfig, args.config, **overrides)
    config.output_dir = config.output_dir or "outputs/probe"
    results = run_probe(config, progress=show_progress(args))
    from ..evaluation.report import zorro_markdown

    print(zorro_markdown([results.to_dict()]))
    print(f"\nwrote {config.output_dir}/probe.json, probe.md, probe.png")
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "probe",
        help="Zorro grammar probes: masked LMs by holistic scoring and pseudo-log-likelihood, causal LMs by log-likelihood",
    )
    parser.add_argument("model", metavar="MODEL", help="checkpoint folder or Hub id")
    parser.add_argument("--zorro-dir", required=True, help="Zorro folder (e.g. ../shared/data/zorro) or one of its sentence folders")
    parser.add_argument("--version", help="sub-folder of --zorro-dir to read: sentences (default) or sentences_conll2021")
    parser.add_argument("--methods", help="comma-separated: holistic,pll (masked LMs; default both), loglik (causal LMs)")
    parser.add_argument("--paradigms", help="comma-separated subset of the 23 paradigms (default all)")
    parser.add_argument("--limit", type=int, help="pairs per paradigm (default all 2,000)")
    parser.add_argument("--batch-size", type=int, help="sentences (pll: masked copies) per model call (default 128)")
    parser.add_argument("--tokenizer", help="tokenizer folder or Hub id (default: the model's own)")
    parser.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's; 1 is much faster on a "
                        "busy shared machine)")
    parser.add_argument("--device", help="cpu, cuda, ... (default: cuda if available, else cpu)")
    parser.add_argument("--dtype", help="float32 (default), bfloat16, float16")
    parser.add_argument("--kind", choices=["auto", "mlm", "causal"], help="model kind (default auto, from the config)")
    parser.add_argument("--attn-implementation", help="ssa_auto (default), ssa_eager, ssa_flex, ssa_blockwise")
    parser.add_argument("--trust-remote-code", action="store_true", help="allow a checkpoint's own modeling code")
    parser.add_argument("--name", help="display name (default: the folder name)")
    parser.add_argument("--save-scores", action="store_true", help="also write every pair's scores (probe_scores.json)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars (they show on a terminal only)")
    parser.add_argument("--config", help="YAML file of ProbeConfig fields (command-line options win)")
    parser.add_argument("--output-dir", help="(default outputs/probe) folder for probe.json, probe.md, probe.png")
    parser.set_defaults(func=run)
