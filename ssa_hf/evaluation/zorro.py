"""Zorro grammar probes (Huebner et al. 2021): 23 paradigms of minimal pairs, each line pair (ungrammatical,
grammatical); a model is right on a pair when it scores the grammatical sentence higher. A tie (equal scores) is
broken at random with a seeded generator (`ties: random`, default) or counted as wrong (`ties: wrong`, what the
public Zorro and BabyBERTa scoring code does with its strict comparison); the tie count and the accuracy with ties
counted as wrong are always reported too.

Scoring methods (`SCORING_METHODS`):
- `holistic` (masked LMs; BabyBERTa's): the unmasked sentence, with the tokenizer's special tokens, goes through the
  model once; score = minus the mean cross-entropy of predicting every non-pad token at its own position.
- `pll` (masked LMs): pseudo-log-likelihood (Salazar et al. 2020): each non-special token masked in turn; score = the
  sum of log p(token | the rest).
- `loglik` (causal LMs): sentence log-likelihood, sum over tokens of log p(token | preceding tokens), after a prefix
  token (BOS, else EOS as lm-eval does) so that the first word is scored too.
"""

from __future__ import annotations

import logging
import random
import time
import zlib
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from ..data.corpus import pad_rows
from ..data.sources import iter_lines
from ..data.tokenizer import check_tokenizer_source
from ..regular_files import check_model_folder
from ..reporting import OutputDir
from .config import SCORING_METHODS, TIE_RULES, ProbeConfig, check_dtype, did_you_mean
from .checkpoint import checkpoint_info, default_name, start_model_run

log = logging.getLogger(__name__)

ZORRO_PARADIGMS = (
    "agreement_determiner_noun-across_1_adjective",
    "agreement_determiner_noun-between_neighbors",
    "agreement_subject_verb-across_prepositional_phrase",
    "agreement_subject_verb-across_relative_clause",
    "agreement_subject_verb-in_question_with_aux",
    "agreement_subject_verb-in_simple_question",
    "anaphor_agreement-pronoun_gender",
    "argument_structure-dropped_argument",
    "argument_structure-swapped_arguments",
    "argument_structure-transitive",
    "binding-principle_a",
    "case-subjective_pronoun",
    "ellipsis-n_bar",
    "filler-gap-wh_question_object",
    "filler-gap-wh_question_subject",
    "irregular-verb",
    "island-effects-adjunct_island",
    "island-effects-coordinate_structure_constraint",
    "local_attractor-in_question_with_aux",
    "npi_licensing-matrix_question",
    "npi_licensing-only_npi_licensor",
    "quantifiers-existential_there",
    "quantifiers-superlative",
)

DEFAULT_METHODS = {"mlm": ["holistic", "pll"], "causal": ["loglik"]}


@dataclass
class ProbeResults:
    name: str
    model: dict[str, Any]
    settings: dict[str, Any]
    versions: dict[str, Any]
    paradigms: dict[str, dict[str, dict[str, Any]]]
    mean: dict[str, float]
    wall_time_s: float
    kind: str = "zorro"
    files: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def accuracy(self, paradigm: str, method: str) -> float:
        return self.paradigms[paradigm][method]["accuracy"]


# --------------------------------------------------------------------------------------------------- data


def resolve_zorro_dir(zorro_dir: str | Path, version: str = "sentences") -> Path:
    """The folder holding the paradigm .txt files."""
    root = Path(zorro_dir).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"--zorro-dir {root} is not a folder (expected the Zorro paradigm files)")
    if any(root.glob("*.txt")):
        return root.resolve()
    sub = root / version
    if sub.is_dir() and any(sub.glob("*.txt")):
        return sub.resolve()
    raise FileNotFoundError(
        f"no Zorro paradigm files (*.txt) in {root} or {sub}; expected e.g. {root}/{version}/quantifiers-superlative.txt"
    )


def load_paradigm(path: str | Path, limit: int | None = None) -> list[tuple[str, str]]:
    """(ungrammatical, grammatical) pairs: odd lines are ungrammatical, even lines grammatical (1-based)."""
    path = Path(path)
    # a byte-order mark (files saved by some Windows editors) is not part of the first sentence: as a character it
    # would change that sentence's tokens and scores
    lines = [(line.removeprefix("\ufeff") if number == 1 else line).strip() for number, line in iter_lines(path)]
    while lines and not lines[-1]:
        lines.pop()
    if not lines:
        raise ValueError(f"{path}: empty paradigm file")
    if len(lines) % 2:
        raise ValueError(f"{path}: {len(lines)} lines; Zorro files hold pairs (bad, good), an even number of lines")
    empty = [i + 1 for i, line in enumerate(lines) if not line]
    if empty:
        raise ValueError(f"{path}: empty sentence on line(s) {empty[:5]}")
    pairs = list(zip(lines[0::2], lines[1::2]))
    return pairs[: int(limit)] if limit else pairs


def load_zorro(folder: Path, paradigms: list[str] | None = None, limit: int | None = None) -> dict[str, list[tuple[str, str]]]:
    names = list(paradigms) if paradigms else list(ZORRO_PARADIGMS)
    missing = [name for name in names if not (folder / f"{name}.txt").is_file()]
    if missing:
        present = sorted(p.stem for p in folder.glob("*.txt"))
        raise FileNotFoundError(
            f"missing Zorro paradigm file(s) in {folder}: {', '.join(f'{m}.txt' for m in missing)}"
            f"{did_you_mean(missing, present)}"
            + ("" if paradigms else " (all 23 paradigms are scored unless --paradigms names a subset)")
        )
    return {name: load_paradigm(folder / f"{name}.txt", limit) for name in names}


# ------------------------------------------------------------------------------------------------ scoring


def _batches(items: list, size: int):
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _pad(rows: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids and the attention mask (1 = token, 0 = pad), on `device`."""
    ids, mask = pad_rows(rows, pad_id)
    return ids.to(device), mask.to(device)


def _masked_lm_logits_at(model, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Logits at one position per row. When the model is a base encoder plus an `lm_head` (RoBERTa, SSABert) or
    `cls` (BERT) head, the head runs on those positions only (the vocabulary projection of every other position
    would be thrown away); otherwise the full forward."""
    head = getattr(model, "lm_head", None) or getattr(model, "cls", None)
    base = getattr(model, "base_model", None)
    rows = torch.arange(ids.shape[0], device=ids.device)
    if head is not None and base is not None and base is not model:
        hidden = base(input_ids=ids, attention_mask=mask).last_hidden_state
        return head(hidden[rows, positions][:, None, :])[:, 0].float()
    return model(input_ids=ids, attention_mask=mask).logits[rows, positions].float()


def _pad_id(tokenizer) -> int:
    for token_id in (tokenizer.pad_token_id, tokenizer.eos_token_id, 0):
        if token_id is not None:
            return int(token_id)
    return 0


def _by_length(encoded: list[list[int]]) -> list[int]:
    """Indices ordered by length (less padding per batch); results are put back in the input order."""
    return sorted(range(len(encoded)), key=lambda i: len(encoded[i]))


def _progress(total: int, desc: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="sent", disable=not enabled, leave=False)


def _score_sequences(model, tokenizer, encoded: list[list[int]], batch_size: int, progress: bool, desc: str,
                     score) -> list[float]:
    """`score(logits, ids, mask)` (one value per row) of every token sequence in `encoded`, in batches of similar
    length, in the input order."""
    device = next(model.parameters()).device
    scores = [0.0] * len(encoded)
    with _progress(len(encoded), desc, progress) as bar:
        for chunk in _batches(_by_length(encoded), batch_size):
            ids, mask = _pad([encoded[i] for i in chunk], _pad_id(tokenizer), device)
            logits = model(input_ids=ids, attention_mask=mask).logits.float()
            for i, value in zip(chunk, score(logits, ids, mask).tolist()):
                scores[i] = value
            bar.update(len(chunk))
    return scores


def _minus_mean_nll(logits: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    token_nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids, reduction="none")
    return -((token_nll * mask).sum(1) / mask.sum(1))


def _next_token_loglik(logits: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    logprobs = logits[:, :-1].log_softmax(-1).gather(2, ids[:, 1:, None]).squeeze(2)
    return (logprobs * mask[:, 1:]).sum(1)


@torch.no_grad()
def score_holistic(model, tokenizer, sentences: list[str], batch_size: int = 64, progress: bool = False) -> list[float]:
    """Minus the mean token cross-entropy of each unmasked sentence (special tokens included, pads excluded)."""
    encoded = [tokenizer(s, add_special_tokens=True)["input_ids"] for s in sentences]
    return _score_sequences(model, tokenizer, encoded, batch_size, progress, "holistic", _minus_mean_nll)


@torch.no_grad()
def score_pll(model, tokenizer, sentences: list[str], batch_size: int = 64, progress: bool = False) -> list[float]:
    """Pseudo-log-likelihood: sum over non-special tokens of log p(token) with that token replaced by the mask."""
    if tokenizer.mask_token_id is None:
        raise ValueError("pll scoring needs a tokenizer with a mask token (a masked-LM tokenizer)")
    device = next(model.parameters()).device
    mask_id = int(tokenizer.mask_token_id)
    rows: list[tuple[int, int, list[int], int]] = []  # (sentence, position, masked input, original token)
    for index, sentence in enumerate(sentences):
        enc = tokenizer(sentence, add_special_tokens=True, return_special_tokens_mask=True)
        ids, special = enc["input_ids"], enc["special_tokens_mask"]
        positions = [p for p, s in enumerate(special) if not s]
        if not positions:
            raise ValueError(f"pll: sentence {sentence!r} has no non-special token")
        for position in positions:
            masked = list(ids)
            masked[position] = mask_id
            rows.append((index, position, masked, ids[position]))
    scores = [0.0] * len(sentences)
    order = sorted(range(len(rows)), key=lambda r: len(rows[r][2]))
    with _progress(len(rows), "pll (masked tokens)", progress) as bar:
        for chunk in _batches(order, batch_size):
            ids, mask = _pad([rows[r][2] for r in chunk], _pad_id(tokenizer), device)
            positions = torch.tensor([rows[r][1] for r in chunk], device=device)
            targets = torch.tensor([rows[r][3] for r in chunk], device=device)
            picked = _masked_lm_logits_at(model, ids, mask, positions).log_softmax(-1)
            values = picked.gather(1, targets[:, None]).squeeze(1).tolist()
            for r, value in zip(chunk, values):
                scores[rows[r][0]] += value
            bar.update(len(chunk))
    return scores


def causal_prefix(tokenizer) -> tuple[int | None, str]:
    """The token put before each sentence so that its first word is scored: BOS, else EOS (as lm-eval)."""
    if tokenizer.bos_token_id is not None:
        return int(tokenizer.bos_token_id), "bos"
    if tokenizer.eos_token_id is not None:
        return int(tokenizer.eos_token_id), "eos"
    return None, "none (the first token of each sentence is not scored)"


@torch.no_grad()
def score_loglik(model, tokenizer, sentences: list[str], batch_size: int = 64, progress: bool = False) -> list[float]:
    """Sum of log p(token | preceding tokens) over each sentence's tokens, after the prefix token."""
    prefix, _ = causal_prefix(tokenizer)
    encoded = []
    for sentence in sentences:
        ids = tokenizer(sentence, add_special_tokens=False)["input_ids"]
        if prefix is not None:
            ids = [prefix] + ids
        if len(ids) < 2:
            raise ValueError(f"loglik: sentence {sentence!r} has too few tokens to score")
        encoded.append(ids)
    return _score_sequences(model, tokenizer, encoded, batch_size, progress, "loglik", _next_token_loglik)


SCORERS = {"holistic": score_holistic, "pll": score_pll, "loglik": score_loglik}


def pair_accuracy(bad_scores: list[float], good_scores: list[float], ties: str = "random", seed: int = 0) -> dict[str, Any]:
    """Accuracy over pairs: grammatical scored higher. Ties: each broken by a fair coin from `random.Random(seed)`
    (`ties="random"`) or counted as wrong (`"wrong"`). Also returns the tie count and the ties-as-wrong accuracy."""
    if ties not in TIE_RULES:
        raise ValueError(f"ties must be one of {TIE_RULES}, got {ties!r}")
    if len(bad_scores) != len(good_scores) or not good_scores:
        raise ValueError(f"need as many ungrammatical as grammatical scores (and at least one), got {len(bad_scores)}, {len(good_scores)}")
    correct = sum(g > b for b, g in zip(bad_scores, good_scores))
    tied = sum(g == b for b, g in zip(bad_scores, good_scores))
    rng = random.Random(seed)
    won = sum(rng.random() < 0.5 for _ in range(tied)) if ties == "random" else 0
    n = len(good_scores)
    return {"accuracy": (correct + won) / n, "correct": correct, "ties": tied, "ties_won": won,
            "accuracy_ties_wrong": correct / n, "tie_rule": ties, "n": n}


def tie_seed(base: int, paradigm: str, method: str) -> int:
    """A seed per (paradigm, method), so that a paradigm's tie-breaks do not depend on which others were run."""
    return zlib.crc32(f"{base}|{paradigm}|{method}".encode())


# ------------------------------------------------------------------------------------------------- model


def load_probe_model(config: ProbeConfig, model: str):
    """(model, tokenizer, kind) with kind "mlm" or "causal"; a ValueError says why a model cannot be loaded."""
    import ssa_hf  # noqa: F401  (registers the ssa-hf model classes)
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer

    from ..hub.folders import WeightsError, load_checked, refuse_stock_class_for_scoring_weights, safe_weights_kwargs
    from .lm_eval_model import is_masked_lm_config

    hint = " (a checkpoint folder needs config.json, weights and a tokenizer; a Hub id needs network access or a cached copy)"
    from ..devices import resolve_device

    device = resolve_device(config.device)  # (before loading: a missing device is the first thing to report)
    try:
        model_config = AutoConfig.from_pretrained(model, trust_remote_code=config.trust_remote_code)
        tokenizer = AutoTokenizer.from_pretrained(config.tokenizer or model, trust_remote_code=config.trust_remote_code)
    except (OSError, ValueError, ImportError) as error:
        raise ValueError(f"cannot load model {model!r}: {error}{hint}") from error
    refuse_stock_class_for_scoring_weights(model, config.trust_remote_code)
    detected = "mlm" if is_masked_lm_config(model_config) else "causal"
    kind = detected if config.kind == "auto" else config.kind
    if kind != detected:  # the other head on this body: a bidirectional "causal" model, a masked head from nothing
        what = {"mlm": "a masked LM (every token sees those after it)", "causal": "a causal LM"}
        raise ValueError(
            f"--kind {kind}: {model} is {what[detected]} ({type(model_config).__name__}); scoring it as "
            f"{'a causal' if kind == 'causal' else 'a masked'} LM would give meaningless results. Use --kind "
            f"{detected} (or auto)")
    auto_class = AutoModelForMaskedLM if kind == "mlm" else AutoModelForCausalLM
    dtype = config.dtype if config.dtype == "auto" else getattr(torch, check_dtype(config.dtype))
    kwargs: dict[str, Any] = {"trust_remote_code": config.trust_remote_code, "dtype": dtype,
                              **safe_weights_kwargs(model, config.trust_remote_code)}
    if config.attn_implementation:
        kwargs["attn_implementation"] = config.attn_implementation
    try:
        loaded, weight_problems = load_checked(auto_class, model, config, **kwargs)
    except WeightsError:
        raise  # (its own message names the tensor and the option)
    except (OSError, EnvironmentError) as error:
        raise ValueError(f"cannot load model {model!r} as {auto_class.__name__}: {error}{hint}") from error
    except ValueError as error:
        raise ValueError(f"cannot load model {model!r} as {auto_class.__name__} (kind={kind}): {error}") from error
    loaded.weight_problems = weight_problems  # (recorded in probe.json)
    loaded.to(device).eval()
    return loaded, tokenizer, kind


# --------------------------------------------------------------------------------------------------- run


def run_probe(config: ProbeConfig, progress: bool = True) -> ProbeResults:
    """Score every pair of the chosen paradigms with every method; per-paradigm accuracy and the mean over
    paradigms; with output_dir, probe.json, probe.md and probe.png."""
    import transformers

    import ssa_hf

    start = time.time()
    if config.threads is None:  # many small batches: threads beyond the free cores only contend
        from ..devices import free_cpu_threads

        config = replace(config, threads=free_cpu_threads())
    model_name, is_local = start_model_run(config)
    if is_local:
        check_model_folder(model_name)  # (a FIFO, a JSON list, sizes < 1: one line, before transformers reads them)
    if config.tokenizer:
        check_tokenizer_source(config.tokenizer)
    folder = resolve_zorro_dir(config.zorro_dir, config.version)
    data = load_zorro(folder, config.paradigms, config.limit)
    model, tokenizer, kind = load_probe_model(config, model_name)
    methods = list(config.methods or DEFAULT_METHODS[kind])
    wrong = [m for m in methods if SCORING_METHODS[m] != kind]
    if wrong:
        raise ValueError(
            f"scoring method(s) {wrong} need a {'masked' if kind == 'causal' else 'causal'} LM; {model_name} is "
            f"{'a masked' if kind == 'mlm' else 'a causal'} LM: use {DEFAULT_METHODS[kind]}"
        )
    name = config.name or default_name(model_name)
    paradigms: dict[str, dict[str, dict[str, Any]]] = {}
    pair_scores: dict[str, dict[str, list]] = {}
    from tqdm.auto import tqdm

    for index, paradigm in enumerate(tqdm(list(data), desc=f"zorro ({name})", unit="paradigm", disable=not progress)):
        if not progress:  # off a terminal, a plain line per paradigm (a full run takes minutes)
            log.info("zorro (%s): paradigm %d/%d %s (%d pairs), %.0f s so far", name, index + 1, len(data), paradigm,
                     len(data[paradigm]), time.time() - start)
        pairs = data[paradigm]
        bad = [b for b, _ in pairs]
        good = [g for _, g in pairs]
        paradigms[paradigm] = {}
        pair_scores[paradigm] = {}
        for method in methods:
            scores = SCORERS[method](model, tokenizer, bad + good, int(config.batch_size), progress)
            bad_scores, good_scores = scores[: len(bad)], scores[len(bad) :]
            paradigms[paradigm][method] = pair_accuracy(
                bad_scores, good_scores, config.ties, tie_seed(config.tie_seed, paradigm, method)
            )
            pair_scores[paradigm][method] = [[b, g] for b, g in zip(bad_scores, good_scores)]
    mean = {m: sum(paradigms[p][m]["accuracy"] for p in paradigms) / len(paradigms) for m in methods}
    settings = {
        "zorro_dir": str(folder),
        "zorro_version": folder.name,
        "paradigms": list(data),
        "pairs_per_paradigm": {p: len(v) for p, v in data.items()},
        "limit": config.limit,
        "methods": methods,
        "model_kind": kind,
        "batch_size": int(config.batch_size),
        "threads": int(config.threads),
        "device": str(next(model.parameters()).device),
        "dtype": config.dtype,
        "attn_implementation": getattr(model.config, "_attn_implementation", None),
        "ties": ("broken at random (seeded: tie_seed, paradigm, method)" if config.ties == "random" else "count as wrong"),
        "tie_seed": config.tie_seed,
    }
    if kind == "causal":
        settings["prefix_token"] = causal_prefix(tokenizer)[1]
    results = ProbeResults(
        name=name,
        model=checkpoint_info(model_name, is_local, model, getattr(model, "weight_problems", None)),
        settings=settings,
        versions={"transformers": transformers.__version__, "torch": torch.__version__, "ssa_hf": ssa_hf.__version__},
        paradigms=paradigms,
        mean=mean,
        wall_time_s=round(time.time() - start, 2),
    )
    if config.output_dir:
        write_probe_results(OutputDir(config.output_dir, writes=["probe*.json", "probe.md", "probe.png"]), results, pair_scores if config.save_scores else None)
    return results


def write_probe_results(out: OutputDir, results: ProbeResults, pair_scores: dict | None = None) -> None:
    from .report import zorro_figure, zorro_markdown

    results.files.update(json=str(out.file("probe.json")), markdown=str(out.file("probe.md")), plot=str(out.file("probe.png")))
    if pair_scores is not None:
        results.files["scores"] = str(out.file("probe_scores.json"))
        out.write_json("probe_scores.json", {"order": "[ungrammatical, grammatical] per pair", "scores": pair_scores})
    out.write_json("probe.json", results.to_dict())
    out.write_markdown("probe.md", zorro_markdown([results.to_dict()]))
    out.save_figure("probe.png", zorro_figure([results.to_dict()]))
