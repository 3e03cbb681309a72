"""Perplexity of a causal LM on random fixed-length windows of a corpus (as the SSA paper: 1,000 random
1,024-token windows of FineWeb-Edu and of Wikipedia).

The corpus is tokenised document by document and joined with the eos token after each document (the training
stream's layout); `windows` start positions are drawn uniformly (with replacement) by a seeded generator, each
window of `window_length` tokens is scored on its `window_length - 1` next-token predictions, and the perplexity
is exp of the mean negative log-likelihood over all scored tokens. The result records the number of windows, the
distinct windows, the tokens scored and the size of the corpus, so figures can be compared on equal terms.
The window length defaults to the length the model was trained on; longer windows get a warning.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..data.sources import TextSource, iter_texts
from ..hub.folders import load_checked, refuse_stock_class_for_scoring_weights, safe_weights_kwargs
from ..data.tokenizer import check_tokenizer_source
from ..regular_files import check_model_folder
from ..reporting import OutputDir, markdown_table
from .config import PerplexityConfig

logger = logging.getLogger("ssa_hf.perplexity")


@dataclass
class PerplexityResult:
    model: str
    data: str
    windows: int
    distinct_windows: int
    window_length: int
    tokens_scored: int
    corpus_tokens: int
    corpus_documents: int
    mean_nll: float
    perplexity: float
    seed: int
    dtype: str
    device: str
    weight_problems: dict[str, list[str]] | None = None  # what --allow-weight-mismatch / --allow-nonfinite-weights let by

    def row(self) -> list[Any]:
        return [self.data, self.windows, self.window_length, self.tokens_scored, self.corpus_tokens,
                round(self.mean_nll, 4), round(self.perplexity, 3)]


TABLE_HEADERS = ["data", "windows", "window length", "tokens scored", "corpus tokens", "mean NLL", "perplexity"]


def progress_bar(progress: bool | None, **kwargs):
    """A tqdm bar; `progress=None` shows it only on a terminal (no carriage-return updates in log files)."""
    from tqdm.auto import tqdm

    return tqdm(disable=None if progress is None else not progress, dynamic_ncols=True, mininterval=1.0, **kwargs)


def corpus_token_stream(tokenizer, texts, max_tokens: int | None = None,
                        progress: bool | None = False) -> tuple[np.ndarray, int]:
    """(token ids of the documents joined with eos after each, number of documents)."""
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("the tokenizer has no eos token to separate documents")
    pieces, total, documents, batch = [], 0, 0, []
    bar = progress_bar(progress, desc="tokenising", unit=" docs", leave=False)

    def flush():
        nonlocal total
        for ids in tokenizer(batch, add_special_tokens=False, verbose=False)["input_ids"]:
            pieces.append(np.asarray(ids + [eos], dtype=np.int64))
            total += len(ids) + 1
        bar.update(len(batch))
        batch.clear()

    for text in texts:
        batch.append(text)
        documents += 1
        if len(batch) == 256:
            flush()
            if max_tokens is not None and total >= max_tokens:
                break
    if batch:
        flush()
    bar.close()
    stream = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
    return (stream[:max_tokens] if max_tokens is not None else stream), documents


def sample_windows(length: int, windows: int, window_length: int, seed: int) -> np.ndarray:
    """Start positions of `windows` uniformly random windows of `window_length` tokens in a stream of `length`."""
    if window_length < 2:
        raise ValueError(f"window_length must be >= 2 (a window predicts window_length - 1 tokens), got {window_length}")
    if windows < 1:
        raise ValueError(f"windows must be >= 1, got {windows}")
    if length < window_length:
        raise ValueError(
            f"the corpus has {length} tokens, fewer than one window of {window_length}; use more data or shorter windows"
        )
    return np.random.default_rng(seed).integers(0, length - window_length + 1, size=windows)


@torch.no_grad()
def window_perplexity(
    model, stream: np.ndarray, starts: np.ndarray, window_length: int, batch_size: int = 8,
    progress: bool | None = False, description: str = "windows",
) -> tuple[float, int]:
    """(mean NLL, tokens scored) of the windows starting at `starts`."""
    device = next(model.parameters()).device
    total_nll, total_tokens = 0.0, 0
    model.eval()
    bar = progress_bar(progress, total=len(starts), desc=description, unit=" windows")
    for first in range(0, len(starts), batch_size):
        chunk = starts[first : first + batch_size]
        inputs = torch.from_numpy(np.stack([stream[s : s + window_length] for s in chunk])).to(device)
        logits = model(input_ids=inputs).logits.float()
        nll = F.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]), inputs[:, 1:].reshape(-1), reduction="sum"
        )
        total_nll += float(nll)
        total_tokens += inputs[:, 1:].numel()
        bar.update(len(chunk))
    bar.close()
    return total_nll / total_tokens, total_tokens


def heldout_source(model_dir: str | Path):
    """The held-out validation texts of the run that produced `model_dir` (from its training_config.yaml: the run
    folder's, which names the data as given, when `model_dir` is RUN/final; final/'s own copy holds no absolute
    local paths, so data outside $SSA_HF_DATA_DIR is named there by file name only)."""
    from ..data.corpus import split_validation
    from ..train.config import load_config

    run_file = Path(model_dir).parent / "training_config.yaml"
    config_file = run_file if Path(model_dir).name == "final" and run_file.is_file() else Path(model_dir) / "training_config.yaml"
    if not config_file.is_file():
        raise FileNotFoundError(
            f"{config_file} does not exist: --heldout needs a folder written by `ssa-hf pretrain` (its final/ folder)"
        )
    config = load_config(config_file)
    _, validation = split_validation(config.data, config.seed)
    if validation is None:
        raise ValueError(f"the run of {model_dir} held out no validation documents (data.validation_documents: 0)")
    description = config.data.validation.describe() if config.data.validation else (
        f"held-out documents of {config.data.train.describe()} ({config.data.validation_documents})"
    )
    return (record["text"] for record in validation), description


def trained_length(model_path: str | Path, config) -> tuple[int | None, str]:
    """(the sequence length the model was trained on, where that figure comes from): the block size its
    `ssa-hf pretrain` run recorded in training_config.yaml, else the config's max_position_embeddings."""
    config_file = Path(model_path) / "training_config.yaml"
    if config_file.is_file():
        from ..train.config import load_config

        return int(load_config(config_file).data.block_size), f"the block size of its training run ({config_file})"
    positions = getattr(config, "max_position_embeddings", None)
    return (int(positions), "max_position_embeddings in its config") if positions else (None, "")


def resolve_window_length(window_length: int | None, model_path, config, beyond_positions: bool = False) -> int:
    """`window_length`, or by default the model's trained length; a longer window gets a warning, and one longer
    than the model's positions (max_position_embeddings) is an error unless `beyond_positions`."""
    positions = getattr(config, "max_position_embeddings", None)
    if window_length is not None and positions and window_length > positions and not beyond_positions:
        raise ValueError(
            f"window_length {window_length} is longer than the {positions} positions of {model_path} "
            f"(max_position_embeddings): give --window-length {positions} or less, or pass --beyond-positions to "
            "measure position extrapolation (rotary models only; learned position embeddings have no such rows)"
        )
    length, origin = trained_length(model_path, config)
    if window_length is None:
        if length is None:
            raise ValueError(f"cannot tell the length {model_path} was trained on; give window_length (--window-length)")
        logger.info("windows of %d tokens: %s", length, origin)
        return length
    if length is not None and window_length > length:
        logger.warning("windows of %d tokens are longer than the %d the model was trained on (%s): the perplexity "
                       "then measures length extrapolation too", window_length, length, origin)
    return window_length


def text_sources(model_path, corpora: list[str], heldout: bool, name, split: str, text_field: str,
                 max_documents: int | None) -> list[tuple[Any, str]]:
    """(texts, description) of every corpus to score: the held-out documents of the model's run, then `corpora`."""
    sources = []
    if heldout:
        texts, description = heldout_source(model_path)
        if max_documents is not None:
            texts = (t for _, t in zip(range(max_documents), texts))
        sources.append((texts, description))
    for path in corpora:
        source = TextSource(path=path, name=name, split=split, text_field=text_field, max_documents=max_documents)
        sources.append((iter_texts(source), source.describe()))
    return sources


def evaluate_perplexity(model_path: str, data: str | list[str] | None = None, *, progress: bool | None = None,
                        **settings: Any) -> list[PerplexityResult]:
    """Perplexity of the causal LM at `model_path` on random windows of each corpus in `data` (Hub data set names
    or local files; `name`/`split`/`text_field` apply to Hub names) and, with `heldout=True`, of the held-out
    documents of the run that trained it (in-distribution). `settings` are the other fields of `PerplexityConfig`.
    Writes perplexity.json/.md into `output_dir`. The model folder's own Python code (config.json auto_map) runs
    only with `trust_remote_code=True`; ssa-hf checkpoints load with the installed classes without it.

    `window_length=None` takes the length the model was trained on (`trained_length`); `progress=None` shows
    progress bars on a terminal only."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    import ssa_hf  # noqa: F401  (registers the model classes)

    config = PerplexityConfig(data=[data] if isinstance(data, str) else list(data or []), **settings).validate()
    if not config.data and not config.heldout:
        raise ValueError("nothing to evaluate: give --data FILE_OR_HUB (repeatable) and/or --heldout")
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}.get(config.dtype)
    if torch_dtype is None:
        raise ValueError(f"dtype must be float32, bfloat16 or float16, got {config.dtype!r}")
    if not Path(model_path).is_dir() and not Path(model_path).exists() and "/" not in str(model_path):
        raise FileNotFoundError(f"model folder {model_path!r} does not exist")
    from .checkpoint import check_tokenizer, is_causal_lm_config, resolve_model

    trust = config.trust_remote_code
    resolve_model(model_path)  # (a path that does not exist is not taken for a Hub id: one line)
    check_model_folder(model_path)  # (a FIFO, a JSON list, sizes < 1: one line, before transformers reads them)
    weights = safe_weights_kwargs(model_path, trust)  # (a folder of pickled weights: one line, before any other work)
    refuse_stock_class_for_scoring_weights(model_path, trust)
    if Path(model_path).exists():
        check_tokenizer(*resolve_model(model_path), config.tokenizer)  # ssa-hf's message, not a tokenizer library's
    model_config = AutoConfig.from_pretrained(model_path, trust_remote_code=trust)
    architectures = getattr(model_config, "architectures", None) or []
    if not is_causal_lm_config(model_config):
        raise ValueError(
            f"{model_path} is a {architectures[0]}: window perplexity needs a causal LM. A masked LM's validation "
            "loss and perplexity (on masked tokens) are in the metrics.json of its training run"
        )
    window_length = resolve_window_length(config.window_length, model_path, model_config, config.beyond_positions)
    sources = text_sources(model_path, config.data, config.heldout, config.name, config.split, config.text_field,
                           config.max_documents)
    from ..devices import resolve_device

    device = resolve_device(config.device)
    if config.tokenizer:
        check_tokenizer_source(config.tokenizer)  # (a missing folder, a FIFO: one line)
    tokenizer = AutoTokenizer.from_pretrained(config.tokenizer or model_path, trust_remote_code=trust)
    try:
        model, weight_problems = load_checked(AutoModelForCausalLM, model_path, config, dtype=torch_dtype,
                                              trust_remote_code=trust, **weights)  # (weights as they say, or refused)
    except OSError as error:  # transformers' "no file named model.safetensors ..." and the like: one line
        raise ValueError(f"cannot load model {model_path!r}: {' '.join(str(error).split())}") from None
    model = model.to(device)
    results = []
    for texts, description in sources:
        stream, documents = corpus_token_stream(tokenizer, texts, progress=progress)
        try:
            starts = sample_windows(len(stream), config.windows, window_length, config.seed)
        except ValueError as error:
            raise ValueError(f"{description}: {error}") from None
        mean_nll, scored = window_perplexity(model, stream, starts, window_length, config.batch_size, progress,
                                            description[:48])
        results.append(PerplexityResult(
            model=str(model_path), data=description, windows=int(len(starts)),
            distinct_windows=int(len(set(starts.tolist()))), window_length=window_length, tokens_scored=scored,
            corpus_tokens=int(len(stream)), corpus_documents=documents, mean_nll=mean_nll,
            perplexity=math.exp(mean_nll) if mean_nll < 700 else float("inf"), seed=config.seed, dtype=config.dtype,
            device=str(device), weight_problems=weight_problems,
        ))
    if config.output_dir is not None:
        out = OutputDir(config.output_dir, writes=["perplexity.json", "perplexity.md"])
        out.write_json("perplexity.json", [asdict(r) for r in results])
        out.write_markdown(
            "perplexity.md",
            f"# Perplexity of {model_path}\n\n{config.windows} random windows of {window_length} tokens per corpus, "
            f"seed {config.seed}, {config.dtype} on {device}.\n\n" + perplexity_table(results),
        )
    return results


def perplexity_table(results: list[PerplexityResult]) -> str:
    return markdown_table(TABLE_HEADERS, [r.row() for r in results])
