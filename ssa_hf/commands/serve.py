"""`ssa-hf serve`: a model folder behind transformers' OpenAI-compatible server (Chat Completions, Responses,
streaming, continuous batching on ssa-hf's paged attention)."""

EXTRA = "serve"


def run(args) -> int:
    from ..serving.server import serve

    serve(args.model, host=args.host, port=args.port, continuous_batching=args.continuous_batching,
          trust_remote_code=args.trust_remote_code, device=args.device, dtype=args.dtype,
          attn_implementation=args.attn_implementation, max_model_len=args.max_model_len,
          cb_num_blocks=args.cb_num_blocks, cb_max_batch_tokens=args.cb_max_batch_tokens, log_level=args.log_level,
          exit_after=args.exit_after)
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "serve", help="serve a model with transformers' OpenAI-compatible server",
        description="Serve a model folder (or Hub id) with transformers' own server (`transformers serve`): "
                    "/v1/chat/completions (streaming too), /v1/responses, /v1/completions, /v1/models; the chat "
                    "template is the tokenizer's. Models transformers does not ship load through AutoModelForCausalLM: "
                    "ssa-hf's families with the installed classes, other custom models with --trust-remote-code.")
    parser.add_argument("model", help="model folder or Hub id (a tokenizer with a chat template next to it)")
    parser.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="listen port (default 8000)")
    parser.add_argument("--continuous-batching", action="store_true",
                        help="batch concurrent requests (transformers' continuous batching; ssa-hf's paged attention)")
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="allow the code saved next to a model (its auto_map); ssa-hf's own families load "
                             "with the installed classes")
    parser.add_argument("--device", default="auto", help="device (default auto)")
    parser.add_argument("--dtype", default="auto", help="weights' dtype: auto (as saved), float32, bfloat16, ...")
    parser.add_argument("--attn-implementation", default=None,
                        help="attention implementation: ssa_auto (default), ssa_eager, ssa_blockwise, ssa_flex, or a "
                             "standard name they stand for (eager, sdpa, flex_attention)")
    parser.add_argument("--max-model-len", type=int, default=None, help="longest request, prompt and answer, in tokens")
    parser.add_argument("--cb-num-blocks", type=int, default=None, help="continuous batching: KV cache blocks")
    parser.add_argument("--cb-max-batch-tokens", type=int, default=None,
                        help="continuous batching: most tokens in one batch")
    parser.add_argument("--log-level", default="info", help="server log level (default info)")
    parser.add_argument("--exit-after", type=float, default=None, metavar="SECONDS",
                        help="stop the server after this many seconds (smoke tests, CI)")
    parser.set_defaults(func=run)
