#!/usr/bin/env bash
# Every command from a normal (non-editable) install, run outside the checkout (issue 26): build the wheel, install
# it with torch into a fresh venv, and run each `ssa-hf` command and `ssa-hf-lm-eval` on tiny generated inputs in an
# empty folder (so configs/, model_cards/ and everything else a run needs must come from the installed package).
#
#   scripts/smoke_installed.sh            # a fresh venv in a temporary folder (CI: .ci/run)
#   SMOKE_VENV=/tmp/venv scripts/smoke_installed.sh   # reuse a venv: only the wheel is reinstalled
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/ssa-hf-smoke.XXXXXX")
venv=${SMOKE_VENV:-$work/venv}
started=$SECONDS

# the wheel, built from a copy of what the build reads (no build/ or egg-info left in the checkout)
mkdir -p "$work/src" "$work/dist" "$work/run"
cp "$repo"/{pyproject.toml,setup.py,MANIFEST.in,README.md} "$work/src/"
cp -r "$repo"/{ssa_hf,configs,model_cards} "$work/src/"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" wheel -q --no-deps -w "$work/dist" "$work/src"
# torch pinned in the same pip call (any other torch requirement pulls a multi-GB CUDA build)
"$venv/bin/pip" install -q --force-reinstall --no-deps "$work/dist"/ssa_hf-*.whl
# first the core alone (models, kernel, convert, push): no extra
"$venv/bin/pip" install -q torch==2.13.0 "$work/dist"/ssa_hf-*.whl
echo "+ installed $(ls "$work/dist") (core) into $venv ($((SECONDS - started)) s)"

cd "$work/run"
unset PYTHONPATH SSA_HF_CONFIGS_DIR SSA_HF_MODEL_CARDS_DIR
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_HOME="$work/hf_home" TOKENIZERS_PARALLELISM=false
export PATH="$venv/bin:$PATH"
step() { echo "+ $*"; "$@" > "$work/last.log" 2>&1 || { cat "$work/last.log"; echo "FAILED: $*" >&2; exit 1; }; tail -n 2 "$work/last.log"; }

# inputs: a corpus, made-up ARC-Easy files in the ../shared/data layout, Zorro pairs, a stock Llama checkpoint
python - <<'EOF'
import json, random
from pathlib import Path
random.seed(0)
words = "the cat dog sat on mat a child likes some toys every bird can fly and runs to house big small red".split()
Path("corpus.txt").write_text("\n\n".join(" ".join(random.choice(words) for _ in range(40)) + " ." for _ in range(300)))
arc = Path("data/arc"); arc.mkdir(parents=True)
rows = [{"id": f"q{i}", "question": f"Which one is {w}?", "answerKey": "A",
         "choices": {"text": [w, "rock", "sun", "tree"], "label": ["A", "B", "C", "D"]}} for i, w in enumerate(words[:6])]
for split in ("test", "train", "validation"):
    (arc / f"ARC-Easy-{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
from ssa_hf.evaluation.zorro import ZORRO_PARADIGMS
zorro = Path("zorro/sentences"); zorro.mkdir(parents=True)
for name in ZORRO_PARADIGMS:
    (zorro / f"{name}.txt").write_text("the dog run to the park .\nthe dog runs to the park .\n")
from transformers import LlamaConfig, LlamaForCausalLM
LlamaForCausalLM(LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2)).save_pretrained("llama")
EOF

# the core install: a model loads, converts, generates and publishes (dry run); every other command names its extra
step ssa-hf --help
step ssa-hf params
step ssa-hf convert llama llama_ssa
step ssa-hf push llama_ssa someone/tiny-ssa --dry-run --no-validate-online
step ssa-hf demo --output-dir demo_core
step python -c "import torch, ssa_hf; from transformers import AutoModelForCausalLM as A; m = A.from_pretrained('llama_ssa'); \
print(type(m).__name__, m.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=3, do_sample=False).tolist())"
refuses() {  # the command fails with one line naming the extra's pip command, before any work
    echo "+ $* (without its extra)"
    if "$@" > "$work/last.log" 2>&1; then cat "$work/last.log"; echo "FAILED: ran without its extra: $*" >&2; exit 1; fi
    grep -q 'pip install "ssa-hf\[' "$work/last.log" && [ "$(grep -c . "$work/last.log")" = 1 ] \
        || { cat "$work/last.log"; echo "FAILED: no one-line extra message: $*" >&2; exit 1; }
    cat "$work/last.log"
}
refuses ssa-hf pretrain --config configs/pretrain/tiny_causal.yaml --output_dir refused
refuses ssa-hf eval llama_ssa --tasks arc_easy
refuses ssa-hf icl --preset quick --output-dir refused
refuses ssa-hf reproduce --scale cpu --plan
refuses ssa-hf export llama_ssa --format onnx --output refused
refuses ssa-hf serve llama_ssa
[ ! -e refused ] || { echo "a refused command wrote its output folder" >&2; exit 1; }

"$venv/bin/pip" install -q torch==2.13.0 "$(ls "$work/dist"/ssa_hf-*.whl)[all]"
echo "+ installed the [all] extra ($((SECONDS - started)) s)"

tiny_run=(--data.train.path corpus.txt --data.train.max_documents 250 --tokenizer.vocab_size 300
          --tokenizer.train_documents 250 --per_device_train_batch_size 4 --max_steps 3 --warmup_steps 1
          --eval_steps 3 --save_steps 3)
step ssa-hf pretrain --config configs/pretrain/tiny_causal.yaml --output_dir causal "${tiny_run[@]}" \
    --data.validation_documents 20 --data.block_size 32
step ssa-hf pretrain --config configs/pretrain/tiny_masked.yaml --output_dir masked "${tiny_run[@]}" \
    --data.validation.path corpus.txt --data.validation_documents 0 --data.max_length 32
step ssa-hf perplexity causal/final --data corpus.txt --windows 4 --window-length 16 --output-dir ppl
step ssa-hf eval causal/final --data-dir data --tasks arc_easy --limit 4 --output-dir eval_causal
step ssa-hf-lm-eval --model ssa-hf --model_args pretrained=causal/final --tasks arc_easy \
    --include_path eval_causal/lm_eval_tasks --limit 4
step ssa-hf probe masked/final --zorro-dir zorro --limit 1 --methods holistic --output-dir probe_masked
step ssa-hf compare eval_causal probe_masked ppl --output-dir compare
step ssa-hf push causal/final someone/tiny-ssa --dry-run --no-validate-online
step ssa-hf icl --preset quick --tasks every --scoring softmax,ssa --seeds 0 --steps 2 --eval_batches 1 \
    --sigmas 1 12 --lengths 21 --output-dir icl
step ssa-hf demo --output-dir demo
# the plan and its checks: this folder lacks most of the data, so it lists the problems and exits 1
echo "+ ssa-hf reproduce --scale cpu --plan --data-dir data"
if ssa-hf reproduce --scale cpu --plan --data-dir data > "$work/last.log" 2>&1; then
    cat "$work/last.log"; echo "FAILED: the plan found no problem in a folder without the data" >&2; exit 1
fi
grep -q "checked before any run:" "$work/last.log" && grep -q "ssa-hf data download" "$work/last.log" \
    || { cat "$work/last.log"; echo "FAILED: ssa-hf reproduce --plan" >&2; exit 1; }
tail -n 2 "$work/last.log"
step ssa-hf export llama_ssa --format onnx --output onnx_export
step ssa-hf serve --help
for folder in causal/final masked/final llama_ssa icl demo compare; do [ -e "$folder" ] || { echo "missing $folder" >&2; exit 1; }; done
echo "smoke test of the installed package passed ($((SECONDS - started)) s)"
rm -rf "$work"
