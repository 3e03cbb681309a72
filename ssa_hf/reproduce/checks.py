"""What `ssa-hf reproduce` can know before its first step: every training config, every evaluation setting, the
data each reads and the code each needs under the installed libraries, and the launch settings.

`preflight(config)` returns one line per setting (what `--plan` prints) and raises ConfigError naming every
problem at once; `run_reproduce` calls it before anything runs, so that a setting that cannot work stops the call
then, not after hours of training (the paper scale's ReCoRD once did: lm-eval's stock scorer needs a module that
transformers 5 removed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..options import ConfigError
from .config import ReproduceConfig


def _hub_offline() -> bool:
    import os

    return any(os.environ.get(name, "").lower() in ("1", "true", "yes", "on")
               for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _is_local(path: str) -> bool:
    from ..data.sources import expand_path

    text = expand_path(path)
    return text.startswith((".", "/", "~")) or Path(text).exists() or not (text.count("/") == 1 and " " not in text)


def _source(what: str, path: str | None, name: str | None, lines: list, problems: list) -> None:
    """A corpus: a local file/folder/glob that must exist, or a Hub data set that offline must be cached."""
    if not path:
        return
    from ..data.sources import expand_path

    if _is_local(path):
        text = expand_path(path)
        found = Path(text).exists() or any(Path(text).parent.glob(Path(text).name)) if text else False
        (lines if found else problems).append(f"{what}: {text}" + ("" if found else " does not exist"))
        return
    hub = path + (f" ({name})" if name else "")
    if _hub_offline():
        problems.append(f"{what}: {hub} is read from the Hub, which is switched off here (HF_HUB_OFFLINE / "
                        "HF_DATASETS_OFFLINE): go online, or give a local copy in the config")
    else:
        lines.append(f"{what}: {hub} from the Hub (reachability is not checked before the run)")


def _check_pretrain(kind: str, experiment, config: ReproduceConfig, lines: list, problems: list) -> None:
    from ..train import load_config as load_train_config
    from .runs import pretrain_values

    for arm in experiment.arms:
        seed = (experiment.seeds.confirmatory or [0])[0]
        try:
            train = load_train_config(None, pretrain_values(experiment, arm, seed, Path("OUTPUT"), config.threads))
        except (ValueError, TypeError, FileNotFoundError, ConfigError) as error:
            problems.append(f"{kind} arm {arm}: its pretraining config does not load: {error}")
            continue
        if arm == experiment.control:
            _check_global_batch(kind, train, config, problems)
            data = train.data
            _source(f"{kind} training data", data.train.path, data.train.name, lines, problems)
            if data.validation is not None:
                _source(f"{kind} validation data", data.validation.path, data.validation.name, lines, problems)
            pretrained = getattr(train.tokenizer, "pretrained", None)
            if pretrained and not _is_local(pretrained):
                if _hub_offline() and not _hub_file_cached(pretrained):
                    problems.append(f"{kind} tokenizer: {pretrained} is on the Hub and not cached, and the Hub is "
                                    "switched off here")
                else:
                    lines.append(f"{kind} tokenizer: {pretrained} (Hub)")
    lines.append(f"{kind} pretraining configs: {len(experiment.arms)} arms load ({', '.join(experiment.arms)})")


def _check_global_batch(kind: str, train, config: ReproduceConfig, problems: list) -> None:
    """Under `accelerate launch`, the global batch must split into whole accumulation steps."""
    from .runs import uses_launch

    if not uses_launch(config.launch, kind) or train.global_batch_size is None:
        return
    processes = launch_processes(config)
    per_step = train.per_device_train_batch_size * max(1, processes)
    if processes and train.global_batch_size % per_step:
        problems.append(f"{kind}: global_batch_size {train.global_batch_size} is not a multiple of "
                        f"per_device_train_batch_size {train.per_device_train_batch_size} x {processes} processes")


def _hub_file_cached(repo: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return any(isinstance(try_to_load_from_cache(repo, name), str)
               for name in ("tokenizer.json", "tokenizer_config.json", "config.json"))


def _check_zorro(settings: dict, lines: list, problems: list) -> None:
    from ..data.sources import expand_path
    from ..evaluation import ProbeConfig
    from ..evaluation.zorro import ZORRO_PARADIGMS, resolve_zorro_dir
    from .runs import resolve_path

    unknown = sorted(set(settings) - {"zorro_dir", "methods", "limit", "batch_size", "device", "version"})
    if unknown:
        problems.append(f"masked evaluation.zorro: unknown keys {unknown}")
    zorro_dir = expand_path(settings.get("zorro_dir", "${SSA_HF_DATA_DIR}/zorro"))
    try:
        ProbeConfig(model="(checked)", zorro_dir=zorro_dir, methods=settings.get("methods", ["holistic"]),
                    limit=settings.get("limit"), batch_size=settings.get("batch_size", 128)).validate()
        folder = resolve_zorro_dir(resolve_path(zorro_dir), settings.get("version", "sentences"))
    except (ValueError, FileNotFoundError) as error:
        problems.append(f"Zorro: {error}")
        return
    missing = [p for p in ZORRO_PARADIGMS if not (folder / f"{p}.txt").is_file()]
    if missing:
        problems.append(f"Zorro: {folder} lacks {len(missing)} of the {len(ZORRO_PARADIGMS)} paradigm files "
                        f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''})")
    else:
        lines.append(f"Zorro: all {len(ZORRO_PARADIGMS)} paradigms in {folder}, methods "
                     f"{settings.get('methods', ['holistic'])}, {settings.get('limit') or 'all'} pairs each")


def _check_perplexity(settings: dict, lines: list, problems: list) -> None:
    from ..evaluation.config import PerplexityConfig

    unknown = sorted(set(settings) - {"windows", "window_length", "batch_size", "seed", "device",
                                      "out_of_distribution", "out_of_distribution_name"})
    if unknown:
        problems.append(f"causal evaluation.perplexity: unknown keys {unknown}")
    try:
        PerplexityConfig(windows=settings.get("windows", 200), window_length=settings.get("window_length"),
                         batch_size=settings.get("batch_size", 16)).validate()
    except ValueError as error:
        problems.append(f"perplexity: {error}")
    lines.append(f"perplexity: {settings.get('windows', 200)} windows of the held-out training documents")
    _source("perplexity out of distribution", settings.get("out_of_distribution"),
            settings.get("out_of_distribution_name"), lines, problems)


def _check_lm_eval(settings: dict, data_dir: str | None, lines: list, problems: list) -> None:
    try:
        import lm_eval
    except ImportError:
        problems.append("lm-eval: not installed (pip install 'ssa-hf[eval]')")
        return
    from ..data.sources import expand_path
    from ..evaluation import EvalConfig
    from ..evaluation import lm_tasks

    settings = dict(settings)
    root = Path(expand_path(settings.pop("data_dir", None) or data_dir or "${SSA_HF_DATA_DIR}")).resolve()
    try:
        config = EvalConfig(model="(checked)", data_dir=str(root), **settings)
        config.validate()
    except (TypeError, ValueError) as error:
        problems.append(f"lm-eval settings: {error}")
        return
    unknown = [t for t in config.tasks if t not in lm_tasks.LOCAL_TASKS]
    if unknown:
        problems.append(f"lm-eval tasks {unknown}: not tasks this package runs on local or Hub data "
                        f"(known: {', '.join(lm_tasks.LOCAL_TASKS)})")
    known = [t for t in config.tasks if t in lm_tasks.LOCAL_TASKS]
    try:
        lm_tasks.check_task_code(known)
    except ValueError as error:
        problems.extend(str(error).splitlines())
        return
    where = []
    for name in known:
        task = lm_tasks.LOCAL_TASKS[name]
        scorer = f", scored by {task.definition}" if task.definition else ""
        if lm_tasks.has_local_copy(task, root):
            try:
                files = lm_tasks.resolve_files(task, root)
                count = [lm_tasks.check_task_file(task, path) for path in files.values() if lm_tasks._is_jsonl(path)]
            except (ValueError, FileNotFoundError) as error:
                problems.append(f"lm-eval task {name}: {error}")
                continue
            where.append(f"{name} (local, {count[0] if count else '?'} documents{scorer})")
        elif task.bundled:
            problems.append(f"lm-eval task {name}: no local copy under {root} ({', '.join(task.files.values())})")
        elif _hub_offline() and not lm_tasks.hub_copy_cached(task):
            problems.append(lm_tasks.unavailable_message(task, root))
        else:
            path, hub_name = lm_tasks.stock_dataset(task)
            where.append(f"{name} (Hub {path}{'/' + hub_name if hub_name else ''}{scorer})")
    lines.append(f"lm-eval {lm_eval.__version__}: {len(known)} tasks load their code here"
                 f"{': ' + ', '.join(where) if where else ''}; "
                 f"{config.num_fewshot}-shot, limit {config.limit or 'none'}")


def _check_launch(config: ReproduceConfig, lines: list, problems: list) -> None:
    if config.launch is None:
        return
    from ..resources import config_file

    path = config_file(str(config.launch["config_file"]))
    if not Path(path).is_file():
        problems.append(f"launch.config_file: {config.launch['config_file']} does not exist")
        return
    try:
        import accelerate  # noqa: F401
    except ImportError:
        problems.append("launch: accelerate is not installed (pip install 'ssa-hf[train]')")
        return
    count = launch_processes(config)
    if count < 1:
        problems.append("launch.num_processes is null (every visible GPU) but no GPU is visible: give a count "
                        "(--num-processes N), or train each run in its worker's process (--no-launch)")
        return
    lines.append(f"{', '.join(config.launch.get('kinds') or ['masked', 'causal'])} trainings: accelerate launch "
                 f"--config_file {config.launch['config_file']}, "
                 f"{count} processes each" + (" (1: trained in the worker's process)" if count == 1 else ""))


def launch_processes(config: ReproduceConfig) -> int:
    """Processes per language-model training under `launch` (0 when null and no GPU is visible)."""
    count = (config.launch or {}).get("num_processes")
    if count is not None:
        return int(count)
    import torch

    return torch.cuda.device_count()


def _check_devices(config: ReproduceConfig, lines: list, problems: list) -> None:
    if not config.devices:
        return
    cuda = [d for d in config.devices if d.startswith("cuda")]
    if cuda:
        import torch

        count = torch.cuda.device_count()
        bad = [d for d in cuda if count == 0 or (":" in d and int(d.split(":")[1]) >= count)]
        if bad:
            problems.append(f"devices: {bad} not visible here ({count} GPUs)")
    lines.append(f"devices: {', '.join(config.devices)} (one run per device at a time)")


def preflight(config: ReproduceConfig, raise_errors: bool = True) -> tuple[list[str], list[str]]:
    """(lines describing each checked setting, problems); with raise_errors, a ConfigError listing every problem.
    Run with $SSA_HF_DATA_DIR pointing at the config's data (`runs.data_dir_env`)."""
    lines: list[str] = []
    problems: list[str] = []
    _check_devices(config, lines, problems)
    _check_launch(config, lines, problems)
    for kind in ("masked", "causal"):
        experiment = getattr(config, kind)
        if experiment is None:
            continue
        _check_pretrain(kind, experiment, config, lines, problems)
        evaluation: dict[str, Any] = experiment.evaluation
        known = {"masked": ("zorro",), "causal": ("perplexity", "lm_eval")}[kind]
        extra = sorted(set(evaluation) - set(known))
        if extra:
            problems.append(f"{kind}.evaluation: unknown evaluations {extra} (known: {list(known)})")
        if evaluation.get("zorro") is not None:
            _check_zorro(evaluation["zorro"], lines, problems)
        if evaluation.get("perplexity") is not None:
            _check_perplexity(evaluation["perplexity"], lines, problems)
        if evaluation.get("lm_eval") is not None:
            _check_lm_eval(evaluation["lm_eval"], config.data_dir, lines, problems)
    if problems and raise_errors:
        raise ConfigError("this config cannot run as it is (nothing was started):\n" + "\n".join(f"  - {p}" for p in problems))
    return lines, problems
