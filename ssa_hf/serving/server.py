"""ssa-hf models behind transformers' own OpenAI-compatible server (`transformers serve`: Chat Completions, the
Responses API, streaming, continuous batching).

transformers' server is used as it is; only the way its model process resolves the model class changes. Its
`ModelLoader._load_model` takes the class as `getattr(transformers, config.architectures[0])`, which finds no class
that transformers does not ship (ssa-hf's, installed or as remote code). `ScoredModelLoader` loads those through
the Auto class of a causal LM instead, which resolves the classes ssa-hf registers (`import ssa_hf`) and, with
`trust_remote_code`, another custom model's `auto_map` (ssa-hf's own families resolve to the installed classes,
which this module imports); stock architectures load as transformers loads them. `serve`
builds transformers' `Serve` and hands it this loader before it starts serving.

Continuous batching (`--continuous-batching`) runs the model's scoring function on ssa-hf's paged attention
(`ssa_hf.models.paged`), through the model's own `init_continuous_batching`.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
from pathlib import Path

import transformers
from transformers.cli.serving.model_manager import ModelLoader

import ssa_hf  # noqa: F401  (registers the ssa-hf configs and classes with the Auto classes, in the model process too)
from ssa_hf.models.attention import IMPLEMENTATIONS
from ssa_hf.models.paged import continuous_batching_problem

logger = logging.getLogger("ssa_hf")

# what transformers' loader accepts as --attn-implementation (its own check), and ssa-hf's names
STANDARD_IMPLEMENTATIONS = ("eager", "sdpa", "flex_attention")
IMPLEMENTATION_CHOICES = (*STANDARD_IMPLEMENTATIONS, *IMPLEMENTATIONS)


class ScoredModelLoader(ModelLoader):
    """transformers' model loader; a model whose class transformers does not ship loads through
    `AutoModelForCausalLM` (ssa-hf's registered classes, or the checkpoint's `auto_map` with `trust_remote_code`).
    Pickled by reference into the model's process, which imports this module (and so `ssa_hf`) to load it."""

    def _load_model(self, model_id: str, tqdm_class=None, progress_callback=None):
        from transformers import AutoConfig, AutoModelForCausalLM
        from transformers.cli.serving.utils import parse_model_id

        repo, revision, gguf_file = parse_model_id(model_id)
        config = AutoConfig.from_pretrained(repo, revision=revision, trust_remote_code=self.trust_remote_code)
        architectures = getattr(config, "architectures", None) or []
        if gguf_file is not None or not architectures or hasattr(transformers, architectures[0]):
            return super()._load_model(model_id, tqdm_class=tqdm_class, progress_callback=progress_callback)
        if progress_callback is not None:
            progress_callback({"status": "loading", "model": model_id, "stage": "config"})
        kwargs = {"revision": revision, "attn_implementation": self.attn_implementation, "dtype": self.dtype,
                  "device_map": self.device, "trust_remote_code": self.trust_remote_code, "tqdm_class": tqdm_class}
        quantization = self.get_quantization_config()
        if quantization is not None:
            kwargs["quantization_config"] = quantization
        model = AutoModelForCausalLM.from_pretrained(repo, **kwargs)
        logger.warning("serving %s as %s.%s (attention %s)", model_id, type(model).__module__, type(model).__name__,
                       model.config._attn_implementation)
        return model

    @classmethod
    def replacing(cls, loader: ModelLoader) -> "ScoredModelLoader":
        """This loader with the settings `loader` resolved (device, dtype, attention, quantization)."""
        scored = cls.__new__(cls)
        scored.__dict__.update(loader.__dict__)
        return scored


def serve(model: str, *, host: str = "127.0.0.1", port: int = 8000, continuous_batching: bool = False,
          trust_remote_code: bool = False, device: str = "auto", dtype: str = "auto",
          attn_implementation: str | None = None, max_model_len: int | None = None,
          cb_num_blocks: int | None = None, cb_max_batch_tokens: int | None = None,
          log_level: str = "info", exit_after: float | None = None) -> None:
    """Serve `model` (a folder or Hub id) with transformers' server until it is stopped (Ctrl+C), or for
    `exit_after` seconds. The OpenAI-compatible endpoints are under http://HOST:PORT/v1 (chat/completions,
    responses, completions, models); the chat template is the tokenizer's."""
    from transformers.cli.serve import Serve

    from ..hub.folders import check_weight_files
    from ..regular_files import check_model_folder

    local = Path(model).expanduser()
    if local.exists():
        if not local.is_dir():
            raise ValueError(f"model {model!r} is a file; give the model folder (with config.json)")
        check_model_folder(local)  # (a FIFO, a JSON list, sizes < 1: one line, before the server starts)
        check_weight_files(local)  # (a damaged safetensors file: refused now, not at the first request)
    elif model.startswith(("/", "./", "../", "~")) or model.count("/") > 1:
        raise FileNotFoundError(f"model folder {model!r} does not exist")
    if exit_after is not None and not (isinstance(exit_after, (int, float)) and math.isfinite(exit_after)
                                       and exit_after > 0):
        raise ValueError(f"--exit-after must be a positive, finite number of seconds, got {exit_after!r}")
    problem = continuous_batching_problem() if continuous_batching else None
    if problem:
        raise ValueError(problem)
    if attn_implementation is not None and attn_implementation not in IMPLEMENTATION_CHOICES:
        raise ValueError(f"attn_implementation must be one of {list(IMPLEMENTATION_CHOICES)}, "
                         f"got {attn_implementation!r}")

    class ScoredServe(Serve):
        # Serve's __init__ resolves the settings and then runs: the loader is replaced in between
        def run(self, *args, **kwargs):
            self.loader = ScoredModelLoader.replacing(self.loader)
            # after transformers' check of the name, which knows only its own (ssa-hf's are checked by the model)
            self.loader.attn_implementation = attn_implementation
            return super().run(*args, **kwargs)

    if exit_after is not None:
        # the server shuts down as on Ctrl+C; its model process follows its parent
        timer = threading.Timer(exit_after, os.kill, (os.getpid(), signal.SIGINT))
        timer.daemon = True
        timer.start()
    ScoredServe(model, continuous_batching=continuous_batching, trust_remote_code=trust_remote_code, device=device,
                dtype=dtype, attn_implementation=None, max_model_len=max_model_len, cb_num_blocks=cb_num_blocks,
                cb_max_batch_tokens=cb_max_batch_tokens, host=host, port=port,
                log_level=log_level)
