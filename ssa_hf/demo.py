"""Attention collapse, in numbers and in a plot (the paper's Theorems 1 and 2 made visible).

One query row sees several ordinary tokens and one large-magnitude token. The scores are multiplied by a
growing factor (as logits grow during training or with large inputs); softmax puts all its weight on the large
token (weights of the others shrink like e^-D), SSA keeps contextual mass on the others (they shrink only
polynomially). Runs on CPU in a second, no downloads.
"""

from __future__ import annotations

import importlib.util
from dataclasses import asdict, dataclass, field

import torch

from .models.scoring import get_scoring_function
from .reporting import OutputDir, markdown_table, pyplot


@dataclass
class DemoConfig:
    scores: list[float] = field(default_factory=lambda: [0.6, -0.4, 1.0, 0.3, -0.9, 0.2, 0.5, 3.0])
    scales: list[float] = field(default_factory=lambda: [1, 2, 4, 8, 16, 32, 64, 128])
    scoring: list[str] = field(default_factory=lambda: ["softmax", "ssa"])
    ssa_b: float = 1.0
    ssa_n: float = 1.5


def run_demo(config: DemoConfig | None = None, output_dir: str | None = None) -> dict:
    config = config or DemoConfig()
    base = torch.tensor(config.scores, dtype=torch.float64)
    large = int(base.argmax())
    params = {"b": torch.tensor([config.ssa_b]), "n": torch.tensor([config.ssa_n])}
    rows, curves = [], {name: {"max_weight": [], "entropy": [], "others_mass": []} for name in config.scoring}
    for scale in config.scales:
        row = [scale]
        for name in config.scoring:
            spec = get_scoring_function(name)
            p = {k: params[k] for k in spec.parameter_names if k in params}
            w = spec.weights((base * scale).float().view(1, 1, 1, -1), None, p).double().view(-1)
            entropy = max(0.0, float(-(w * torch.log(w.clamp_min(1e-300))).sum()))
            curves[name]["max_weight"].append(float(w[large]))
            curves[name]["entropy"].append(entropy)
            curves[name]["others_mass"].append(float(1 - w[large]))
            row += [float(w[large]), entropy]
        rows.append(row)
    headers = ["scale"] + [f"{n} {m}" for n in config.scoring for m in ("max weight", "entropy")]
    table = markdown_table(headers, rows, ".4f")
    result = {"config": asdict(config), "large_token": large, "curves": curves, "table": table}
    if output_dir is not None:
        out = OutputDir(output_dir, writes=["demo.json", "demo.md", "demo.png"])
        out.write_json("demo.json", result)
        out.write_markdown(
            "demo.md",
            "# Attention collapse: softmax vs SSA\n\n"
            f"Scores {config.scores} (token {large} is the large one), multiplied by each scale. "
            f"SSA with b={config.ssa_b}, n={config.ssa_n}.\n\n" + table,
        )
        if importlib.util.find_spec("matplotlib") is None:  # a core install: the numbers without the plot
            result["plot"] = None
            return result
        plt = pyplot()
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
        for name in config.scoring:
            axes[0].plot(config.scales, curves[name]["max_weight"], marker="o", label=name)
            axes[1].plot(config.scales, curves[name]["entropy"], marker="o", label=name)
        for ax, title in zip(axes, ("weight on the large token", "entropy of the row (nats)")):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("score scale")
            ax.set_title(title)
            ax.grid(alpha=0.3)
            ax.legend()
        result["plot"] = str(out.save_figure("demo.png", fig))
    return result
