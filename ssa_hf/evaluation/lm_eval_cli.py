"""lm-eval's own command line with the `ssa-hf` model registered:

    python -m ssa_hf.evaluation.lm_eval_cli --model ssa-hf --model_args pretrained=DIR --tasks arc_easy

Every argument is lm-eval's (`run`, `ls`, `validate`, `--include_path`, ...). lm-eval 0.4 has no plugin discovery,
so the stock `lm_eval` executable cannot see a model name registered by another package; this entry point imports
ssa-hf's registration first and then hands over to lm-eval unchanged.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    from . import register_lm_eval_model

    if not register_lm_eval_model():
        raise SystemExit("lm-eval is not installed: pip install lm-eval")
    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    from lm_eval.__main__ import cli_evaluate

    cli_evaluate()


if __name__ == "__main__":
    main()
