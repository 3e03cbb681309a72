"""Tiny checkpoints and tiny data sets for the evaluation tests, all made up here (no downloads, no shared data).

The data files follow the layout of ../shared/data (arc/, boolq/, hellaswag/, piqa/, zorro/) with a handful of
invented items each; `EXPECTED` holds what the tests should read back from them.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

import ssa_hf
from ssa_hf import SSABertConfig, SSABertForMaskedLM, SSALlamaConfig, SSALlamaForCausalLM
from ssa_hf.evaluation.zorro import ZORRO_PARADIGMS

# ---------------------------------------------------------------------------------------------- data sets

ARC_EASY_TEST = [
    {"id": "e1", "question": "Which thing is hot?", "choices": {"text": ["ice", "snow", "fire", "rain"], "label": ["A", "B", "C", "D"]}, "answerKey": "C"},
    {"id": "e2", "question": "What do plants need?", "choices": {"text": ["light", "rocks", "sand"], "label": ["A", "B", "C"]}, "answerKey": "A"},
    {"id": "e3", "question": "Where do fish live?", "choices": {"text": ["trees", "water", "air", "fire"], "label": ["1", "2", "3", "4"]}, "answerKey": "2"},
    {"id": "e4", "question": "What melts in the sun?", "choices": {"text": ["rock", "ice", "iron", "wood"], "label": ["A", "B", "C", "D"]}, "answerKey": "B"},
    {"id": "e5", "question": "Which is a tool?", "choices": {"text": ["cloud", "hammer", "river", "song"], "label": ["A", "B", "C", "D"]}, "answerKey": "B"},
]
ARC_CHALLENGE_TEST = [
    {"id": "c1", "question": "Why does a ball fall?", "choices": {"text": ["gravity", "light", "sound", "heat"], "label": ["A", "B", "C", "D"]}, "answerKey": "A"},
    {"id": "c2", "question": "What makes a shadow?", "choices": {"text": ["water", "blocked light", "wind", "salt"], "label": ["A", "B", "C", "D"]}, "answerKey": "B"},
    {"id": "c3", "question": "What turns water to ice?", "choices": {"text": ["heat", "cold", "sound", "light", "wind"], "label": ["A", "B", "C", "D", "E"]}, "answerKey": "B"},
]
ARC_TRAIN = [
    {"id": "t1", "question": "What is cold?", "choices": {"text": ["ice", "fire", "sun", "lamp"], "label": ["A", "B", "C", "D"]}, "answerKey": "A"},
    {"id": "t2", "question": "What is wet?", "choices": {"text": ["sand", "rain", "dust", "rock"], "label": ["A", "B", "C", "D"]}, "answerKey": "B"},
]
BOOLQ = [
    {"question": "is the sun hot", "passage": "The sun is a hot star.", "answer": True},
    {"question": "is ice hot", "passage": "Ice is frozen water and is cold.", "answer": False},
    {"question": "do fish swim", "passage": "Fish swim in water.", "answer": True},
    {"question": "can a rock fly", "passage": "A rock is heavy and cannot fly.", "answer": False},
    {"question": "do birds fly", "passage": "Most birds fly with wings.", "answer": True},
    {"question": "is rain wet", "passage": "Rain is water falling from clouds.", "answer": True},
]
HELLASWAG = [
    {"ind": 0, "query": "Cooking: A man cuts bread. he", "label": 1, "endings": ["flies away.", "puts butter on it.", "sings a song.", "jumps in a lake."]},
    {"ind": 1, "query": "Running: A girl ties her shoes. she", "label": 0, "endings": ["runs down the road.", "eats the shoes.", "paints a wall.", "sleeps in a tree."]},
    {"ind": 2, "query": "Washing: A boy fills a bucket. he", "label": 3, "endings": ["reads a book.", "climbs a cloud.", "eats the bucket.", "washes the car with it."]},
    {"ind": 3, "query": "Painting: A woman holds a brush. she", "label": 3, "endings": ["swims away.", "drives the brush.", "sleeps.", "paints the fence."]},
]
PIQA = [
    {"goal": "dry wet hands", "sol1": "rub them with a towel", "sol2": "put them in a lake"},
    {"goal": "open a jar", "sol1": "freeze the jar", "sol2": "twist the lid"},
    {"goal": "cool a drink", "sol1": "add ice to it", "sol2": "add fire to it"},
]
PIQA_LABELS = [0, 1, 0]

#: what a task should read back from the files above: the eval documents' gold indices and choice counts
EXPECTED = {
    "arc_easy": {"gold": [2, 0, 1, 1, 1], "num_choices": [4, 3, 4, 4, 4], "first_choices": ["ice", "snow", "fire", "rain"]},
    "arc_challenge": {"gold": [0, 1, 1], "num_choices": [4, 4, 5], "first_choices": ["gravity", "light", "sound", "heat"]},
    "boolq": {"gold": [1, 0, 1, 0, 1, 1], "num_choices": [2] * 6, "first_choices": ["no", "yes"]},
    "hellaswag": {"gold": [1, 0, 3, 3], "num_choices": [4] * 4, "first_choices": HELLASWAG[0]["endings"]},
    "piqa": {"gold": PIQA_LABELS, "num_choices": [2] * 3, "first_choices": [PIQA[0]["sol1"], PIQA[0]["sol2"]]},
}

# Zorro-style minimal pairs (ungrammatical first), two per paradigm, invented
ZORRO_PAIRS = [
    ("the dog run to the park .", "the dog runs to the park ."),
    ("a cats sat on the mat .", "a cat sat on the mat ."),
    ("she see the big ball .", "she sees the big ball ."),
    ("the children plays with toys .", "the children play with toys ."),
]

GOOD_TEXT = [good for _, good in ZORRO_PAIRS]


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def write_data(root: Path) -> Path:
    """The made-up data sets in the layout of ../shared/data."""
    _jsonl(root / "arc" / "ARC-Easy-test.jsonl", ARC_EASY_TEST)
    _jsonl(root / "arc" / "ARC-Easy-train.jsonl", ARC_TRAIN)
    _jsonl(root / "arc" / "ARC-Easy-validation.jsonl", ARC_TRAIN)
    _jsonl(root / "arc" / "ARC-Challenge-test.jsonl", ARC_CHALLENGE_TEST)
    _jsonl(root / "arc" / "ARC-Challenge-train.jsonl", ARC_TRAIN)
    _jsonl(root / "arc" / "ARC-Challenge-validation.jsonl", ARC_TRAIN)
    _jsonl(root / "boolq" / "validation.jsonl", BOOLQ)
    (root / "hellaswag").mkdir(parents=True, exist_ok=True)
    with gzip.open(root / "hellaswag" / "hellaswag_val.jsonl.gz", "wt") as handle:
        handle.write("".join(json.dumps(r) + "\n" for r in HELLASWAG))
    _jsonl(root / "piqa" / "valid.jsonl", PIQA)
    (root / "piqa" / "valid-labels.lst").write_text("".join(f"{label}\n" for label in PIQA_LABELS))
    return root


def write_zorro(root: Path, pairs_per_paradigm: int = 2) -> Path:
    """A Zorro root with `sentences/` holding all 23 paradigm files (invented pairs, cycled)."""
    folder = root / "sentences"
    folder.mkdir(parents=True, exist_ok=True)
    for p, name in enumerate(ZORRO_PARADIGMS):
        lines = []
        for k in range(pairs_per_paradigm):
            bad, good = ZORRO_PAIRS[(p + k) % len(ZORRO_PAIRS)]
            lines += [bad, good]
        (folder / f"{name}.txt").write_text("\n".join(lines) + "\n")
    return root


# ------------------------------------------------------------------------------------------------ models

CORPUS = (
    [good for _, good in ZORRO_PAIRS]
    + [bad for bad, _ in ZORRO_PAIRS]
    + [r["question"] + " " + " ".join(r["choices"]["text"]) for r in ARC_EASY_TEST + ARC_CHALLENGE_TEST]
    + [r["passage"] + " " + r["question"] + " yes no" for r in BOOLQ]
    + [r["query"] + " " + " ".join(r["endings"]) for r in HELLASWAG]
    + [r["goal"] + " " + r["sol1"] + " " + r["sol2"] for r in PIQA]
    + ["Question: Answer:"]
) * 3


def tokenizer(masked: bool) -> PreTrainedTokenizerFast:
    """Byte-level BPE trained on the fixture texts (most words become single tokens)."""
    specials = ["<pad>", "<s>", "</s>", "<unk>", "<mask>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        CORPUS,
        trainers.BpeTrainer(vocab_size=600, special_tokens=specials, show_progress=False,
                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()),
    )
    if masked:
        tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")))
    kwargs = dict(pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    if masked:
        kwargs["mask_token"] = "<mask>"
    return PreTrainedTokenizerFast(tokenizer_object=tok, **kwargs)


def causal_lm(tok, scoring: str = "ssa", seed: int = 0) -> SSALlamaForCausalLM:
    torch.manual_seed(seed)
    config = SSALlamaConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512, pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, attention_scoring=scoring,
        initializer_range=0.2,  # larger weights: scores large enough that SSA and softmax differ
    )
    return SSALlamaForCausalLM(config).eval()


def masked_lm(tok, scoring: str = "ssa", seed: int = 0) -> SSABertForMaskedLM:
    torch.manual_seed(seed)
    config = SSABertConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=70, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        attention_scoring=scoring, initializer_range=0.2,
    )
    return SSABertForMaskedLM(config).eval()


def save(model, tok, folder: Path) -> Path:
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def train_on(model, tok, sentences: list[str], steps: int = 60, lr: float = 3e-2):
    """A few full-batch steps of next-token training (so the model prefers these sentences)."""
    model.train()
    batch = tok([tok.bos_token + s for s in sentences], return_tensors="pt", padding=True, add_special_tokens=False)
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(steps):
        loss = model(**batch, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    return float(loss.detach())


assert ssa_hf  # the import registers the Auto classes
