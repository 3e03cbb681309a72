"""`ssa-hf perplexity`: perplexity of a causal LM on random fixed-length windows (in- and out-of-distribution)."""


def run(args) -> int:
    from ..cli import show_progress
    from ..evaluation.perplexity import evaluate_perplexity, perplexity_table

    results = evaluate_perplexity(
        args.model,
        args.data,
        heldout=args.heldout,
        name=args.name,
        split=args.split,
        text_field=args.text_field,
        max_documents=args.max_documents,
        windows=args.windows,
        window_length=args.window_length,
        seed=args.seed,
        batch_size=args.batch_size,
        device=args.device,
        dtype=args.dtype,
        output_dir=args.output_dir,
        trust_remote_code=args.trust_remote_code,
        progress=show_progress(args),
    )
    print(perplexity_table(results))
    if args.output_dir:
        print(f"\nwrote {args.output_dir}/perplexity.json and perplexity.md")
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "perplexity",
        help="perplexity of a causal LM on random fixed-length windows of corpora",
        description="Perplexity on N random windows of L tokens (documents joined with eos), e.g. in-distribution "
        "(--heldout: the held-out documents of the training run) and out-of-distribution "
        "(--data ../shared/data/wikitext/wiki.test.raw). Reports mean NLL, perplexity, windows and tokens.",
    )
    parser.add_argument("model", help="model folder (e.g. outputs/pretrain/RUN/final) or Hub id")
    parser.add_argument("--data", action="append", metavar="FILE_OR_HUB",
                        help="corpus: local file/folder/glob (txt, jsonl, parquet, .gz) or Hub data set; repeatable")
    parser.add_argument("--heldout", action="store_true",
                        help="also the held-out validation documents of the run that trained MODEL")
    parser.add_argument("--name", help="Hub data set configuration (e.g. sample-10BT, wikitext-103-raw-v1)")
    parser.add_argument("--split", default="train", help="Hub split (default: train)")
    parser.add_argument("--text-field", default="text", help="field holding the text (default: text)")
    parser.add_argument("--max-documents", type=int, help="read at most this many documents per corpus")
    parser.add_argument("--windows", type=int, default=1000, help="number of random windows (default 1000)")
    parser.add_argument("--window-length", type=int,
                        help="tokens per window (default: the length the model was trained on, i.e. its training "
                             "run's block size, else max_position_embeddings; longer windows get a warning)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the window positions (default 0)")
    parser.add_argument("--batch-size", type=int, default=8, help="windows per forward pass (default 8)")
    parser.add_argument("--device", help="cpu, cuda, ... (default: cuda if available)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--output-dir", help="write perplexity.json and perplexity.md here")
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="allow the model folder's own Python code (not needed for ssa-hf checkpoints)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars (they show on a terminal only)")
    parser.set_defaults(func=run)
