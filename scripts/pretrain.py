#!/usr/bin/env python
"""Pretrain a causal or masked LM with SSA (or any scoring function) attention.

    accelerate launch scripts/pretrain.py --config configs/pretrain/tiny_causal.yaml [--KEY VALUE ...]
    accelerate launch --config_file configs/accelerate/multi_gpu.yaml scripts/pretrain.py \
        --config configs/pretrain/decoder_114m_fineweb_ssa.yaml --output_dir runs/ssa --resume

Every config key is an option (`--max_steps 100`, `--data.block_size 256`, `--model.attention_scoring softmax`,
`--model.overrides num_hidden_layers=4`); `python scripts/pretrain.py --help` lists them. Same as `ssa-hf pretrain`.
"""

import argparse
import sys


def main(argv=None) -> int:
    from ssa_hf.cli import configure_logging
    from ssa_hf.commands.pretrain import is_main_process
    from ssa_hf.train import add_pretrain_arguments, config_from_args, pretrain

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pretrain_arguments(parser)
    args = parser.parse_args(argv)
    configure_logging()
    try:
        config = config_from_args(args)
    except (ValueError, FileNotFoundError) as error:
        parser.error(str(error))
    result = pretrain(config)
    if is_main_process():  # once, not once per process
        print(f"steps {result.steps}; final folder {result.final_dir}; metrics {result.output_dir}/metrics.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
