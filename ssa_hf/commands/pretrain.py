"""`ssa-hf pretrain`: the pretraining run of scripts/pretrain.py (a config file plus --KEY VALUE overrides)."""

# the optional part of the install this command needs (ssa_hf.extras; checked before it runs)
EXTRA = "train"

DESCRIPTION = (
    "Pretrain a causal or masked LM. Any config key is an option: --max_steps 100, "
    "--data.block_size 256, --model.attention_scoring softmax, --model.overrides num_hidden_layers=4. "
    "For several processes use `accelerate launch scripts/pretrain.py` (see docs/pretraining.md)."
)


def full_parser():
    """The parser with one option per config key (built when the command runs; the config classes import no torch,
    so `--help` answers at once)."""
    from ..cli import SuggestingParser
    from ..train.config import add_pretrain_arguments

    parser = SuggestingParser(prog="ssa-hf pretrain", description=DESCRIPTION)
    add_pretrain_arguments(parser)
    return parser


def is_main_process() -> bool:
    """False in the other processes of a distributed run (accelerate launch, torchrun)."""
    from accelerate import PartialState

    return PartialState().is_main_process


def run(args) -> int:
    from ..train.config import config_from_args

    config = config_from_args(full_parser().parse_args(args.extra_args))  # (--help ends here, before torch loads)
    from ..train.loop import pretrain

    result = pretrain(config)
    if not is_main_process():
        return 0  # the main process prints the summary, once
    metrics = result.metrics
    print(
        f"steps {result.steps}; train loss {metrics.get('final_train_loss')}; validation perplexity "
        f"{metrics.get('eval_perplexity')}; tokens/s {metrics.get('train_tokens_per_second')}"
    )
    print(f"final folder: {result.final_dir}; metrics: {result.output_dir}/metrics.json")
    return 0


def register(subparsers) -> None:
    # the options (and --help) are those of full_parser(), parsed when the command runs
    parser = subparsers.add_parser(
        "pretrain", help="pretrain a causal or masked LM (also: accelerate launch scripts/pretrain.py)",
        description=DESCRIPTION, add_help=False,
    )
    parser.set_defaults(func=run, extra_args=True)
