"""`ssa-hf export`: write a model as a torch.export program, ONNX or an AOTInductor package, checked against eager."""

from __future__ import annotations

SUMMARY = "export a model as a torch.export program (.pt2), ONNX or an AOTInductor package"
DESCRIPTION = (
    "Export MODEL (a checkpoint folder) to the folder --output: `pt2` writes model.pt2 (torch.export; load it with "
    "torch.export.load after `import ssa_hf`, or anywhere with --decompose), `onnx` writes model.onnx (the SSA "
    "attention as standard ONNX operators; runs on onnxruntime), `aoti` writes model_aoti.pt2 (compiled C++, "
    "runs with torch alone: torch._inductor.aoti_load_package). The graphs take input_ids and attention_mask "
    "(batch and length dynamic unless --static) and return the logits. Each export is run on fresh inputs and "
    "compared with the eager model before the folder appears; export.json records the figures.")

FORMATS = ("pt2", "onnx", "aoti")  # (ssa_hf.serving.export.FORMATS, named here so that --help imports no torch)


def run(args) -> int:
    if args.format == "onnx":
        from ..extras import require_extra

        require_extra("export", "ssa-hf export --format onnx")
    from ..serving.export import export_model

    result = export_model(args.model, args.output, args.format, overwrite=args.overwrite,
                          trust_remote_code=args.trust_remote_code, dynamic=not args.static,
                          decompose=args.decompose, decode_step=args.decode_step, max_cache_len=args.max_cache_len,
                          check=not args.no_check)
    print(result.summary())
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser("export", help=SUMMARY, description=DESCRIPTION)
    parser.add_argument("model", metavar="MODEL", help="checkpoint folder written by save_pretrained / ssa-hf")
    parser.add_argument("--format", required=True, choices=FORMATS, help="pt2, onnx or aoti")
    parser.add_argument("--output", required=True, metavar="DIR", help="folder to write (created; must not exist "
                        "unless --overwrite, and then must be a folder ssa-hf export wrote)")
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier export in --output")
    parser.add_argument("--static", action="store_true",
                        help="fixed batch size and length (those of the traced sample: 2 x 16)")
    parser.add_argument("--decompose", action="store_true",
                        help="pt2: write the attention in ATen operators (loads without ssa-hf; slower, memory "
                             "quadratic in the length); aoti always does")
    parser.add_argument("--decode-step", action="store_true",
                        help="pt2 of a causal LM: one decoding step over a static KV cache "
                             "(input_ids [1, 1], cache_position [1] -> logits)")
    parser.add_argument("--max-cache-len", type=int, default=128, metavar="N",
                        help="length of the static cache of --decode-step (default 128)")
    parser.add_argument("--no-check", action="store_true", help="skip running the export against the eager model")
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="run the folder's own code (and allow pickled weights)")
    parser.set_defaults(func=run)
