"""The in-context-learning tasks of the SSA paper (REFERENCE §3): samplers, labels, prompt format, curriculum.

A prompt interleaves inputs and labels, x_1, y_1, x_2, y_2, ..., x_L, y_L; the model reads it left to right and
predicts y_i at the position of x_i (it has seen x_1..x_i and y_1..y_{i-1}).

- `every`: y_i = +1 if x_j > 0 for every j <= i, else -1.
- `some`:  y_i = +1 if x_j > 0 for some j <= i, else -1.
- `linear_regression` (old name `linear`): y_i = a * x_i + b, one (a, b) per prompt.

The task table (`ssa_hf.icl.registry.TASKS`) says which sampler, labels, loss, metrics and baselines each task has.

Samplers draw from a `torch.Generator`, so a seed fixes every prompt. Two test distributions:
- the standard one (the paper's): x ~ N(0, sigma) (and a, b ~ N(0, sigma_ab) for `linear_regression`);
- `balanced` (quantifiers, our addition to the paper's protocol): the first counterexample (the first x <= 0 for
  `every`, the first x > 0 for `some`) sits at a uniformly random position in 1..L, or there is none (L + 1
  equally likely cases); inputs keep magnitudes |N(0, sigma)|. Under N(0, 1) a counterexample almost always
  comes within the first few points, so long runs without one are almost absent from training data.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .config import Curriculum  # noqa: F401  (re-exported: it was defined here)

QUANTIFIER_TASKS = ("every", "some")
# the paper's "single large value" probe
PROBE_VALUES = (1.0, -1.0, -2.0, 1000.0)


def check_task(task: str) -> str:
    """The canonical name of `task` (old names accepted), or a ValueError listing the tasks."""
    from .registry import get_task

    return get_task(task).name


def quantifier_labels(xs: Tensor, task: str) -> Tensor:
    """Labels (+1 / -1, same dtype as xs) of a quantifier task for inputs xs [..., L]."""
    if task not in QUANTIFIER_TASKS:
        raise ValueError(f"quantifier_labels: task must be one of {QUANTIFIER_TASKS}, got {task!r}")
    positive = xs > 0
    if task == "every":
        holds = torch.cumprod(positive.to(torch.int64), dim=-1).bool()
    else:
        holds = torch.cummax(positive.to(torch.int64), dim=-1).values.bool()
    return torch.where(holds, 1.0, -1.0).to(xs.dtype)


@dataclass
class Prompts:
    """A batch of prompts: inputs xs [B, L], labels ys [B, L] (and the line of `linear_regression` prompts)."""

    task: str
    xs: Tensor
    ys: Tensor
    a: Tensor | None = None
    b: Tensor | None = None

    @property
    def points(self) -> int:
        return self.xs.shape[-1]

    def features(self) -> Tensor:
        """Read-in features [B, 2L, 2]: token 2i is [x_i, 0], token 2i+1 is [y_i, 1].

        The second feature marks the label slots: the RoPE backbone sees only relative positions, so, unlike the
        paper's GPT-2 with absolute position embeddings, it could not otherwise tell an input slot from a label
        slot. The read-in stays linear.
        """
        batch, points = self.xs.shape
        values = torch.stack([self.xs, self.ys], dim=-1).reshape(batch, 2 * points)
        slot = torch.arange(2 * points, device=self.xs.device) % 2
        return torch.stack([values, slot.to(values.dtype).expand(batch, -1)], dim=-1)

    def to(self, device) -> "Prompts":
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return Prompts(self.task, move(self.xs), move(self.ys), move(self.a), move(self.b))


def _normal(shape, sigma: float, generator: torch.Generator | None) -> Tensor:
    return torch.randn(shape, generator=generator) * float(sigma)


def _check_sizes(batch: int, points: int, sigma: float) -> None:
    if batch < 1 or points < 1:
        raise ValueError(f"batch and points must be >= 1, got batch={batch}, points={points}")
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0, got {sigma}")


def sample_standard(
    task: str,
    batch: int,
    points: int,
    sigma: float = 1.0,
    generator: torch.Generator | None = None,
    sigma_ab: float = 1.0,
) -> Prompts:
    """The paper's distribution of `task` (its record's sampler): x ~ N(0, sigma); for `linear_regression`,
    a, b ~ N(0, sigma_ab) per prompt."""
    from .registry import get_task

    return get_task(task).sample(batch, points, sigma, generator, sigma_ab)


def sample_quantifier(task: str, batch: int, points: int, sigma: float = 1.0, generator: torch.Generator | None = None,
                      sigma_ab: float = 1.0) -> Prompts:
    """Quantifier prompts, x ~ N(0, sigma) (`sigma_ab` is unused: the sampler signature of every task)."""
    _check_sizes(batch, points, sigma)
    xs = _normal((batch, points), sigma, generator)
    return Prompts(task, xs, quantifier_labels(xs, task))


def sample_linear(batch: int, points: int, sigma: float = 1.0, generator: torch.Generator | None = None,
                  sigma_ab: float = 1.0) -> Prompts:
    """Prompts of lines a x + b: x ~ N(0, sigma), a, b ~ N(0, sigma_ab) per prompt."""
    _check_sizes(batch, points, sigma)
    xs = _normal((batch, points), sigma, generator)
    if not sigma_ab > 0:
        raise ValueError(f"sigma_ab must be > 0, got {sigma_ab}")
    a = _normal((batch, 1), sigma_ab, generator)
    b = _normal((batch, 1), sigma_ab, generator)
    return Prompts("linear_regression", xs, a * xs + b, a.squeeze(-1), b.squeeze(-1))


def sample_linear_shared_inputs(
    inputs: int, functions: int, points: int, sigma_x: float, sigma_ab: float, generator: torch.Generator | None = None
) -> Prompts:
    """`functions` lines a x + b (a, b ~ N(0, sigma_ab)), each applied to the same `inputs` x-sequences
    (x ~ N(0, sigma_x)): functions x inputs prompts, function by function (the authors' linear test protocol)."""
    _check_sizes(inputs, points, sigma_x)
    if functions < 1 or not sigma_ab > 0:
        raise ValueError(f"need functions >= 1 and sigma_ab > 0, got {functions}, {sigma_ab}")
    xs = _normal((inputs, points), sigma_x, generator)
    a = _normal((functions, 1), sigma_ab, generator)
    b = _normal((functions, 1), sigma_ab, generator)
    xs_all = xs.repeat(functions, 1)
    a_all, b_all = a.repeat_interleave(inputs, 0), b.repeat_interleave(inputs, 0)
    return Prompts("linear_regression", xs_all, a_all * xs_all + b_all, a_all.squeeze(-1), b_all.squeeze(-1))


def sample_balanced(
    task: str, batch: int, points: int, sigma: float = 1.0, generator: torch.Generator | None = None
) -> Prompts:
    """Quantifier prompts whose first counterexample is at a uniformly random position, or absent.

    The position k of the first counterexample is uniform over {1, ..., L, none}. Before k every input has the
    sign that keeps the statement's value (x > 0 for `every`, x <= 0 for `some`), x_k has the other sign, and
    inputs after k have random signs; magnitudes are |N(0, sigma)|.
    """
    if task not in QUANTIFIER_TASKS:
        raise ValueError(f"the balanced test set exists for the quantifier tasks {QUANTIFIER_TASKS}, not {task!r}")
    _check_sizes(batch, points, sigma)
    magnitude = _normal((batch, points), sigma, generator).abs().clamp_min(1e-6)
    first = torch.randint(0, points + 1, (batch, 1), generator=generator)  # 0-based; == points: none
    free_sign = torch.where(torch.rand((batch, points), generator=generator) < 0.5, 1.0, -1.0)
    position = torch.arange(points).expand(batch, -1)
    keep = 1.0 if task == "every" else -1.0  # the sign that does not change the statement's value
    sign = torch.where(position < first, keep, torch.where(position == first, -keep, free_sign))
    xs = sign * magnitude
    return Prompts(task, xs, quantifier_labels(xs, task))


def sample(
    task: str,
    batch: int,
    points: int,
    sigma: float = 1.0,
    generator: torch.Generator | None = None,
    balanced: bool = False,
    sigma_ab: float = 1.0,
) -> Prompts:
    if balanced:
        return sample_balanced(task, batch, points, sigma, generator)
    return sample_standard(task, batch, points, sigma, generator, sigma_ab)


def probe_prompts(task: str, values=PROBE_VALUES) -> Prompts:
    """The single-large-value probe as one prompt with its true labels (quantifier tasks)."""
    if task not in QUANTIFIER_TASKS:
        raise ValueError(f"the single-large-value probe is defined for {QUANTIFIER_TASKS}, not {task!r}")
    xs = torch.tensor([list(values)], dtype=torch.float32)
    return Prompts(task, xs, quantifier_labels(xs, task))
