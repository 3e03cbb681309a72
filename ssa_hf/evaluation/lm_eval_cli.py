"""lm-eval's own command line with the `ssa-hf` model registered:

    python -m ssa_hf.evaluation.lm_eval_cli --model ssa-hf --model_args pretrained=DIR --tasks arc_easy

Every argument is lm-eval's (`run`, `ls`, `validate`, `--include_path`, ...). lm-eval 0.4 has no plugin discovery,
so the stock `lm_eval` executable cannot see a model name registered by another package; this entry point imports
ssa-hf's registration first and then hands over to lm-eval, unchanged but for one default: an evaluation run
without `--device` gets `--device auto` resolved here (CUDA if present, else the CPU), where lm-eval's own default
is `cuda:0` whatever the machine has.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    from . import register_lm_eval_model

    if not register_lm_eval_model():
        raise SystemExit("lm-eval is not installed: pip install lm-eval")
    sys.argv = [sys.argv[0], *with_default_device(sys.argv[1:] if argv is None else list(argv))]
    from lm_eval.__main__ import cli_evaluate

    cli_evaluate()


def with_default_device(args: list[str]) -> list[str]:
    """`args` plus `--device cuda|cpu` (what this machine has) for an evaluation run (`--model ...`) that names
    no device; anything else unchanged."""
    if "--model" not in args or any(a == "--device" or a.startswith("--device=") for a in args):
        return args
    from ..devices import resolve_device

    return [*args, "--device", resolve_device(None)]


if __name__ == "__main__":
    main()
