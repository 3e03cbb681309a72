"""A rehearsal of a scale: the same config, the same code path (every experiment, stage, evaluation and lm-eval
task, the worker processes, the multi-process launch of the trainings, the report), with the models, steps,
seeds and documents shrunk until it runs in minutes on 2 CPU cores, on a small made-up data set in the layout of
../shared/data written here (so it runs offline, anywhere). Its figures mean nothing; what it shows is that the
scale's command gets to its report.

    ssa-hf reproduce --scale paper --rehearse            # small: minutes on 2 cores
    ssa-hf reproduce --scale paper --rehearse tiny       # the smallest (the fast test)
"""

from __future__ import annotations

import copy
import gzip
import json
import random
from pathlib import Path
from typing import Any

from ..options import deep_merge
from .config import ReproduceConfig, config_from_dict, config_to_dict

SIZES = ("tiny", "small")
CPU_LAUNCH = {"config_file": "configs/accelerate/cpu_2proc.yaml", "num_processes": 2}

_NOUNS = ["dog", "cat", "ball", "tree", "bird", "house", "car", "book", "cup", "fish", "girl", "boy", "sun", "box"]
_VERBS = ["sees", "likes", "has", "finds", "wants", "takes", "makes", "holds"]
_ADJECTIVES = ["big", "small", "red", "blue", "happy", "old", "new", "hot"]
_NAMES = ["Anna", "Maria", "Tom", "Paris", "Lima", "Oslo", "Ben", "Kim"]


def _sentence(rng: random.Random) -> str:
    return (f"the {rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)} {rng.choice(_VERBS)} the "
            f"{rng.choice(_NOUNS)} .")


def _jsonl(path: Path, rows: list[dict], gz: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(row) + "\n" for row in rows)
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as handle:
            handle.write(text)
    else:
        path.write_text(text, encoding="utf-8")


def write_rehearsal_data(root: str | Path, documents: int = 12, seed: int = 0) -> Path:
    """Made-up data in the layout of ../shared/data, `documents` items per evaluation file: AO-CHILDES-like
    sentences, web-like documents, WikiText-like text, all 23 Zorro paradigms and every lm-eval task of the
    paper (ARC, BoolQ, HellaSwag, WinoGrande, COPA, CB, ReCoRD)."""
    from ..evaluation.zorro import ZORRO_PARADIGMS

    root = Path(root)
    rng = random.Random(seed)
    for split, count in (("train", 400), ("dev", 60)):
        path = root / "aochildes" / f"aochildes.{split}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(_sentence(rng) for _ in range(count)) + "\n", encoding="utf-8")
    _jsonl(root / "webtext" / "documents.jsonl.gz",
           [{"text": " ".join(_sentence(rng) for _ in range(10))} for _ in range(120)], gz=True)
    (root / "wikitext").mkdir(parents=True, exist_ok=True)
    (root / "wikitext" / "wiki.test.raw").write_text(
        "\n".join(" ".join(_sentence(rng) for _ in range(8)) for _ in range(30)) + "\n", encoding="utf-8")
    sentences = root / "zorro" / "sentences"
    sentences.mkdir(parents=True, exist_ok=True)
    for paradigm in ZORRO_PARADIGMS:
        lines = []
        for _ in range(4):
            noun, verb = rng.choice(_NOUNS), rng.choice(_VERBS)
            lines += [f"the {noun} {verb[:-1]} the ball .", f"the {noun} {verb} the ball ."]  # ungrammatical first
        (sentences / f"{paradigm}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    n = documents

    def arc(prefix: str) -> list[dict]:
        rows = []
        for i in range(n):
            texts = rng.sample(_NOUNS, 4)
            rows.append({"id": f"{prefix}{i}", "question": f"Which {rng.choice(_ADJECTIVES)} thing is here?",
                         "choices": {"text": texts, "label": ["A", "B", "C", "D"]}, "answerKey": "ABCD"[i % 4]})
        return rows

    for subset in ("ARC-Easy", "ARC-Challenge"):
        for split in ("train", "validation", "test"):
            _jsonl(root / "arc" / f"{subset}-{split}.jsonl", arc(f"{subset}-{split}-"))
    _jsonl(root / "boolq" / "validation.jsonl",
           [{"question": f"is the {rng.choice(_NOUNS)} {rng.choice(_ADJECTIVES)}", "passage": _sentence(rng),
             "answer": i % 3 != 0} for i in range(n)])
    _jsonl(root / "hellaswag" / "hellaswag_val.jsonl.gz",
           [{"ind": i, "query": f"Playing: the {rng.choice(_NOUNS)} {rng.choice(_VERBS)}",
             "endings": [f"the {noun} ." for noun in rng.sample(_NOUNS, 4)], "label": i % 4} for i in range(n)],
           gz=True)
    _jsonl(root / "winogrande" / "dev.jsonl",
           [{"qID": f"w{i}", "sentence": f"The {a} saw the {b} because _ was {rng.choice(_ADJECTIVES)}.",
             "option1": f"the {a}", "option2": f"the {b}", "answer": "12"[i % 2]}
            for i, (a, b) in enumerate(rng.sample(_NOUNS, 2) for _ in range(n))])
    _jsonl(root / "copa" / "val.jsonl",
           [{"premise": _sentence(rng).capitalize(), "choice1": _sentence(rng).capitalize(),
             "choice2": _sentence(rng).capitalize(), "question": ("cause", "effect")[i % 2], "label": i % 2, "idx": i}
            for i in range(n)])
    _jsonl(root / "cb" / "val.jsonl",
           [{"premise": _sentence(rng).capitalize(), "hypothesis": _sentence(rng).capitalize(), "label": i % 3,
             "idx": i} for i in range(n)])
    records = []
    for i in range(n):
        a, b, c = rng.sample(_NAMES, 3)
        records.append({"passage": f"{a} met {b} in {c}.\n@highlight\n{a} and {b} talked",
                        "query": f"@placeholder met {b}", "entities": [a, b, c], "answers": [a],
                        "idx": {"passage": i, "query": 0}})
    _jsonl(root / "record" / "val.jsonl", records)
    return root


def _icl_overrides(size: str, config: dict[str, Any]) -> dict[str, Any]:
    steps = 2 if size == "tiny" else 6
    linear = "linear_regression" in (config.get("tasks") or [])
    return {
        "model": {"layers": 1, "heads": 2, "width": 16, "max_points": 128},
        "train": {"steps": steps, "batch_size": 8, "warmup_steps": 0, "checkpoint_every": 2, "log_every": 1,
                  "curriculum": {"start": 5, "end": 7, "increment": 2, "interval": 1}},
        # the endpoints' thresholds (sigma >= 12, >= 100 points, sigma_x >= 5) stay in the sweeps
        "eval": {"sigmas": [1, 12], "lengths": [7, 100], "batches": 1, "batch_size": 8,
                 **({"linear_sigmas_x": [1, 5], "linear_sigmas_ab": [1, 5], "linear_functions": 2} if linear else {})},
    }


_MODEL_SHAPES = {
    "masked": {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2},
    "causal": {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
               "num_key_value_heads": 1, "max_position_embeddings": 64},
}


def _lm_overrides(kind: str, size: str, data_dir: Path) -> dict[str, Any]:
    # 4 steps, a checkpoint every 2: a run killed after its first checkpoint resumes mid-training
    common = {"max_steps": 4, "per_device_train_batch_size": 4, "per_device_eval_batch_size": 8,
              "global_batch_size": None, "warmup_steps": 1, "logging_steps": 1, "eval_steps": 0, "save_steps": 2,
              "save_total_limit": 1, "mixed_precision": "no", "cpu": True, "report_to": ["none"],
              "tokenizer": {"pretrained": None, "vocab_size": 300, "train_documents": None, "min_frequency": 1},
              "model": {"overrides": _MODEL_SHAPES[kind]}}
    if kind == "masked":
        data = {"train": {"path": str(data_dir / "aochildes" / "aochildes.train"), "name": None, "streaming": None},
                "validation": {"path": str(data_dir / "aochildes" / "aochildes.dev")},
                "validation_documents": 20, "max_length": 24}
    else:
        data = {"train": {"path": str(data_dir / "webtext" / "documents.jsonl.gz"), "name": None, "split": "train",
                          "streaming": None},
                "validation_documents": 10, "validation_max_samples": None, "block_size": 32, "pack_documents": 40}
    return {**common, "data": data}


_EVALUATIONS = {
    "zorro": {"limit": 2, "batch_size": 8},
    "perplexity": {"windows": 4, "window_length": 16, "batch_size": 4},
    "lm_eval": {"limit": 3, "batch_size": 4},
}


def rehearsal_config(config: ReproduceConfig, data_dir: str | Path, size: str = "small") -> ReproduceConfig:
    """`config` shrunk to a rehearsal on `data_dir` (write_rehearsal_data's layout): the same experiments, arms,
    claims, endpoints, tests, evaluations and lm-eval tasks; 2 confirmatory seeds (and 1 exploratory where the
    config has any), toy models and steps, a few documents per evaluation; trainings through `accelerate launch`
    over 2 CPU processes (size small) and 2 workers, or in-process with 1 worker (tiny)."""
    if size not in SIZES:
        raise ValueError(f"rehearsal size must be one of {SIZES}, got {size!r}")
    data_dir = Path(data_dir).resolve()
    data = copy.deepcopy(config_to_dict(config))
    data.update(scale="rehearsal", data_dir=str(data_dir), threads=1, device="cpu", devices=None,
                workers=1 if size == "tiny" else 2,
                launch=None if size == "tiny" else {**CPU_LAUNCH, "kinds": (config.launch or {}).get("kinds")},
                description=f"REHEARSAL ({size}) of the {config.scale} scale: its code path at toy sizes on made-up "
                            f"data; the figures mean nothing. The scale: {config.description}")
    for experiment in data.get("icl", {}).values():
        experiment["config"] = deep_merge(experiment["config"], _icl_overrides(size, experiment["config"]))
        _shrink_seeds(experiment["seeds"])
    for kind in ("masked", "causal"):
        experiment = data.get(kind)
        if experiment is None:
            continue
        experiment["overrides"] = deep_merge(experiment.get("overrides") or {}, _lm_overrides(kind, size, data_dir))
        _shrink_seeds(experiment["seeds"])
        evaluation = experiment.get("evaluation") or {}
        for name, settings in evaluation.items():
            if settings is not None:
                evaluation[name] = {**settings, **_EVALUATIONS.get(name, {})}
        if evaluation.get("zorro") is not None:
            evaluation["zorro"]["zorro_dir"] = str(data_dir / "zorro")
        if evaluation.get("perplexity") is not None:
            evaluation["perplexity"].update(out_of_distribution=str(data_dir / "wikitext" / "wiki.test.raw"),
                                            out_of_distribution_name=None)
        if evaluation.get("lm_eval") is not None:
            evaluation["lm_eval"].pop("data_dir", None)
    return config_from_dict(data)


def _shrink_seeds(seeds: dict[str, list[int]]) -> None:
    seeds["confirmatory"] = list(seeds["confirmatory"][:2])
    seeds["exploratory"] = list((seeds.get("exploratory") or [])[:1])
