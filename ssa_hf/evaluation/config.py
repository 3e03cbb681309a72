"""The settings of the evaluations (`EvalConfig`, `ProbeConfig`, `PerplexityConfig`, `CompareConfig`): dataclasses
that the one config loader, `ssa_hf.options`, reads from YAML files and turns into the options of the commands
(each field documented in its class docstring, `name: what it does`). Light to import (no torch), so that the
command line can build its options at once; the checks the settings share are here too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..options import YamlConfig

# dtypes a model can be evaluated in ("auto": the checkpoint's own); float8 and integer types cannot run a forward
DTYPE_NAMES = ("auto", "float32", "bfloat16", "float16", "float64")


def closest(value: Any, choices) -> str:
    """'; did you mean X?' for a near miss among `choices`, else '.'."""
    from ..models.scoring import closest_name

    return closest_name(value, choices)


def did_you_mean(names, choices) -> str:
    """' (did you mean 'x' for 'y'?)' for those of `names` with a near miss among `choices`, else ''."""
    import difflib

    pairs = []
    for name in names:
        match = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1)
        if match:
            pairs.append(f"{match[0]!r} for {name!r}")
    return f" (did you mean {', '.join(pairs)}?)" if pairs else ""


def check_dtype(name: Any, option: str = "dtype") -> str:
    """`name` if it is one of DTYPE_NAMES, else a ValueError that names the option and the choices."""
    if name not in DTYPE_NAMES:
        raise ValueError(f"{option}: {name!r} is not a supported dtype{closest(name, DTYPE_NAMES)} Choose from {list(DTYPE_NAMES)}")
    return name


def check_model_settings(config) -> None:
    """A ValueError naming the setting when `config.batch_size`, `config.threads` or `config.dtype` cannot run."""
    if int(config.batch_size) < 1:
        raise ValueError(f"batch_size must be >= 1, got {config.batch_size}")
    if config.threads is not None and int(config.threads) < 1:
        raise ValueError(f"threads must be >= 1, got {config.threads}")
    check_dtype(config.dtype)


SCORING_METHODS = {"holistic": "mlm", "pll": "mlm", "loglik": "causal"}  # Zorro scoring method -> model kind
TIE_RULES = ("random", "wrong")

DEFAULT_TASKS = ["arc_easy", "arc_challenge", "boolq", "hellaswag"]


def expand_task_names(tasks: list[str]) -> list[str]:
    """`paper` stands for the eight tasks of the paper's table (lm_tasks.PAPER_TASKS); duplicates are dropped."""
    from .lm_tasks import PAPER_TASKS

    expanded: list[str] = []
    for name in tasks:
        for task in PAPER_TASKS if name == "paper" else [name]:
            if task not in expanded:
                expanded.append(task)
    return expanded


@dataclass
class EvalConfig(YamlConfig):
    """One lm-eval run (`ssa-hf eval`; each field is also an option there).

    model: checkpoint folder or Hub id.
    tasks: comma-separated lm-eval tasks (default arc_easy,arc_challenge,boolq,hellaswag; `paper`: the paper's
        six; with --data-dir: arc_easy, arc_challenge, boolq, hellaswag, piqa, winogrande, copa).
    tokenizer: tokenizer folder or Hub id (default: the model's own).
    data_dir: local data in the layout of ../shared/data (default: the stock tasks read the Hub).
    limit: documents per task: a count, or a fraction < 1 (default all).
    num_fewshot: few-shot examples (default 0: zero-shot; always recorded).
    batch_size: batch size of the model calls (default 16).
    device: cpu, cuda, cuda:1, ... (default: cuda if available, else cpu).
    threads: CPU threads for torch (default: torch's; 1 is much faster on a busy shared machine).
    dtype: auto (the checkpoint's), float32, bfloat16, ... (default auto).
    attn_implementation: ssa_auto (default), ssa_eager, ssa_flex, ssa_blockwise.
    trust_remote_code: allow a checkpoint's own modeling code.
    allow_weight_mismatch: evaluate a checkpoint whose weight files lack tensors its config.json needs (they
        would be random) or hold ones it has no place for (refused by default); recorded with the results.
    allow_nonfinite_weights: evaluate a checkpoint with NaN or infinite weights (refused by default); recorded.
    seed: lm-eval's seeds (default 1234).
    output_dir: folder for eval.json, eval.md, eval.png (default outputs/eval).
    name: display name (default: the folder name).
    log_samples: also write every scored document (eval_samples.json).
    model_args: extra keyword arguments of lm-eval's HFLM, KEY=VALUE (e.g. max_length=512).
    """

    model: str = ""
    tasks: list[str] = field(default_factory=lambda: list(DEFAULT_TASKS))
    tokenizer: str | None = None
    data_dir: str | None = None
    limit: int | float | None = None
    num_fewshot: int = 0
    batch_size: int = 16
    device: str | None = None
    threads: int | None = None
    dtype: str = "auto"
    attn_implementation: str | None = None
    trust_remote_code: bool = False
    allow_weight_mismatch: bool = False
    allow_nonfinite_weights: bool = False
    seed: int = 1234
    output_dir: str | None = None
    name: str | None = None
    log_samples: bool = False
    model_args: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        if not self.model:
            raise ValueError("model: give a checkpoint folder or a Hub id")
        if isinstance(self.tasks, str):
            self.tasks = [t for t in self.tasks.split(",") if t]
        self.tasks = expand_task_names(list(self.tasks))
        if not self.tasks:
            raise ValueError("tasks: give at least one task, e.g. arc_easy,arc_challenge,boolq,hellaswag")
        if self.num_fewshot is None or int(self.num_fewshot) < 0:
            raise ValueError(f"num_fewshot must be >= 0, got {self.num_fewshot}")
        if self.limit is not None and not self.limit > 0:
            raise ValueError(f"limit must be > 0 (a count, or a fraction < 1), got {self.limit}")
        if isinstance(self.limit, float) and self.limit >= 1:
            if not self.limit.is_integer():
                raise ValueError(f"limit {self.limit}: a fraction must be < 1, a count a whole number")
            self.limit = int(self.limit)
        check_model_settings(self)


@dataclass
class ProbeConfig(YamlConfig):
    """One Zorro run (`ssa-hf probe`; each field is also an option there).

    model: checkpoint folder or Hub id.
    zorro_dir: Zorro folder (e.g. ../shared/data/zorro) or one of its sentence folders.
    tokenizer: tokenizer folder or Hub id (default: the model's own).
    version: sub-folder of --zorro-dir to read: sentences (default) or sentences_conll2021.
    methods: comma-separated: holistic,pll (masked LMs; default both), loglik (causal LMs).
    paradigms: comma-separated subset of the 23 paradigms (default all).
    limit: pairs per paradigm (default all 2,000).
    batch_size: sentences (pll: masked copies) per model call (default 128).
    device: cpu, cuda, ... (default: cuda if available, else cpu).
    threads: CPU threads for torch (default: the free cores, i.e. the cores minus the load average, at least 1;
        torch's default of every core oversubscribes a busy machine: 5.4x slower than 1 thread, issue 26).
    dtype: float32 (default), bfloat16, float16.
    kind: model kind (default auto, from the config).
    attn_implementation: ssa_auto (default), ssa_eager, ssa_flex, ssa_blockwise.
    trust_remote_code: allow a checkpoint's own modeling code.
    allow_weight_mismatch: probe a checkpoint whose weight files do not match its config.json (refused by default).
    allow_nonfinite_weights: probe a checkpoint with NaN or infinite weights (refused by default).
    output_dir: folder for probe.json, probe.md, probe.png (default outputs/probe).
    name: display name (default: the folder name).
    save_scores: also write every pair's scores (probe_scores.json).
    ties: a tie (equal scores) is broken by a coin seeded by tie_seed, paradigm and method (random, default) or
        counted as wrong (wrong).
    tie_seed: seed of the tie-breaks (default 0).
    """

    model: str = ""
    zorro_dir: str = ""
    tokenizer: str | None = None
    version: str = "sentences"
    methods: list[str] | None = None
    paradigms: list[str] | None = None
    limit: int | None = None
    batch_size: int = 128
    device: str | None = None
    threads: int | None = None
    dtype: str = "float32"
    kind: str = field(default="auto", metadata={"choices": ("auto", "mlm", "causal")})
    attn_implementation: str | None = None
    trust_remote_code: bool = False
    allow_weight_mismatch: bool = False
    allow_nonfinite_weights: bool = False
    output_dir: str | None = None
    name: str | None = None
    save_scores: bool = False
    ties: str = field(default="random", metadata={"choices": TIE_RULES})
    tie_seed: int = 0

    def validate(self) -> None:
        if not self.model:
            raise ValueError("model: give a checkpoint folder or a Hub id")
        if not self.zorro_dir:
            raise ValueError("zorro_dir: give the folder of the Zorro paradigm files (e.g. ../shared/data/zorro)")
        if self.kind not in ("auto", "mlm", "causal"):
            raise ValueError(f"kind must be auto, mlm or causal, got {self.kind!r}")
        if isinstance(self.methods, str):
            self.methods = [m for m in self.methods.split(",") if m]
        if isinstance(self.paradigms, str):
            self.paradigms = [p for p in self.paradigms.split(",") if p]
        for method in self.methods or []:
            if method not in SCORING_METHODS:
                raise ValueError(
                    f"unknown scoring method {method!r}{closest(method, SCORING_METHODS)} Choose from {list(SCORING_METHODS)}"
                )
        if self.limit is not None and int(self.limit) < 1:
            raise ValueError(f"limit (pairs per paradigm) must be >= 1, got {self.limit}")
        check_model_settings(self)
        if self.ties not in TIE_RULES:
            raise ValueError(f"ties must be one of {TIE_RULES}, got {self.ties!r}")


@dataclass
class PerplexityConfig(YamlConfig):
    """The settings of `evaluate_perplexity` (`ssa-hf perplexity`; each field is also an option there).

    data: corpus: local file/folder/glob (txt, jsonl, parquet, .gz) or Hub data set; repeatable.
    heldout: also the held-out validation documents of the run that trained MODEL.
    name: Hub data set configuration (e.g. sample-10BT, wikitext-103-raw-v1).
    split: Hub split (default: train).
    text_field: field holding the text (default: text).
    max_documents: read at most this many documents per corpus.
    windows: number of random windows (default 1000).
    window_length: tokens per window (default: the length the model was trained on, i.e. its training run's
        block size, else max_position_embeddings; longer windows get a warning, and windows longer than
        max_position_embeddings are refused unless beyond_positions).
    beyond_positions: allow windows longer than the model's max_position_embeddings (position extrapolation).
    tokenizer: tokenizer folder or Hub id (default: the model folder's own).
    seed: seed of the window positions (default 0).
    batch_size: windows per forward pass (default 8).
    device: cpu, cuda, ... (default: cuda if available).
    dtype: float32 (default), bfloat16 or float16.
    output_dir: write perplexity.json and perplexity.md here.
    trust_remote_code: allow the model folder's own Python code (not needed for ssa-hf checkpoints).
    allow_weight_mismatch: evaluate a model whose weight files do not match its config.json (refused by default).
    allow_nonfinite_weights: evaluate a model with NaN or infinite weights (refused by default).
    """

    data: list[str] = field(default_factory=list, metadata={"metavar": "FILE_OR_HUB"})
    heldout: bool = False
    name: str | None = None
    split: str = "train"
    text_field: str = "text"
    max_documents: int | None = None
    windows: int = 1000
    window_length: int | None = None
    beyond_positions: bool = False
    tokenizer: str | None = None
    seed: int = 0
    batch_size: int = 8
    device: str | None = None
    dtype: str = field(default="float32", metadata={"choices": ("float32", "bfloat16", "float16")})
    output_dir: str | None = None
    trust_remote_code: bool = False
    allow_weight_mismatch: bool = False
    allow_nonfinite_weights: bool = False

    def validate(self) -> "PerplexityConfig":
        """Counts and sizes that cannot run are refused, naming the option."""
        for name in ("windows", "batch_size", "window_length", "max_documents"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"--{name.replace('_', '-')} must be a whole number >= 1, got {value!r}")
        return self


@dataclass
class CompareConfig(YamlConfig):
    """One comparison report (`ssa-hf compare`).

    results: results JSON files or folders (eval.json, probe.json, lm-eval output, perplexity JSON).
    names: model names, one per result; an empty entry keeps the name in the file.
    output_dir: folder for compare.md, compare.json, plots (default outputs/compare).
    title: report title.
    allow_weight_mismatch: include results of a model evaluated although its weights did not match its config
        (recorded in the result by the evaluation's own option; refused by default).
    allow_nonfinite_weights: include results of a model evaluated with NaN or infinite weights (refused by default).
    """

    results: list[str] = field(default_factory=list)
    names: list[str] | None = None
    output_dir: str | None = None
    title: str = "Model comparison"
    allow_weight_mismatch: bool = False
    allow_nonfinite_weights: bool = False
