"""`ssa-hf data`: the offline data folder (docs/data.md): `download --to DIR` builds it, `check DIR` verifies it,
`list` says what each data set is and which commands read it."""


def run(args) -> int:
    from ..data import layout

    if args.action == "list":
        for dataset in layout.selected(args.only):
            print(f"{dataset.name}/: {dataset.title}\n  from {dataset.origin}; license {dataset.license}\n"
                  f"  read by {', '.join(dataset.used_by)}\n  files: {', '.join(dataset.files[:4])}"
                  + (f" (+{len(dataset.files) - 4} more)" if len(dataset.files) > 4 else ""))
        return 0
    if args.action == "download":
        from ..extras import require_extra

        require_extra("train", "ssa-hf data download")  # `datasets` reads the Hub
        written = layout.download(args.to, args.only)
        problems = layout.check(args.to, args.only)
        for line in problems:
            print(f"problem: {line}")
        print(f"wrote {len(written)} data set(s) under {args.to}; use it with SSA_HF_DATA_DIR={args.to}")
        return 1 if problems else 0
    problems = layout.check(args.folder, args.only)
    for line in problems:
        print(f"problem: {line}")
    unsummed = [d.name for d in layout.selected(args.only) if (layout.Path(args.folder).expanduser() / d.name).is_dir()
                and not layout.has_checksums(args.folder, d.name)]
    if unsummed:
        print(f"no {layout.CHECKSUM_FILE} in {', '.join(unsummed)}: their files are present but not verified")
    print(f"{args.folder}: {'complete' if not problems else f'{len(problems)} problem(s)'}")
    return 1 if problems else 0


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "data", help="build or check the offline data folder (SSA_HF_DATA_DIR)",
        description="The offline data folder that the tiny configs, eval --data-dir, probe, perplexity, "
                    "uptrain-demo and reproduce --scale cpu read (docs/data.md).")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    download = actions.add_parser("download", help="build the folder from the Hub (and two pinned GitHub sources)",
                                  description="Download every data set (or --only some) into DIR, each with "
                                              "SHA256SUMS and SOURCE.json; a set already complete is kept.")
    download.add_argument("--to", required=True, metavar="DIR", help="the data folder to build")
    check = actions.add_parser("check", help="verify a data folder: expected files and checksums")
    check.add_argument("folder", metavar="DIR", help="the data folder (e.g. $SSA_HF_DATA_DIR)")
    listing = actions.add_parser("list", help="what each data set is, its source, license and readers")
    for sub in (download, check, listing):
        sub.add_argument("--only", nargs="+", metavar="NAME",
                         help="these data sets only (webtext_c4 aochildes zorro wikitext arc boolq hellaswag piqa)")
    parser.set_defaults(func=run)
