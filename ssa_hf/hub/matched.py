"""Softmax-matched initialisation of SSA (`convert_checkpoint(..., init="matched")`, `ssa-hf convert --init matched`).

For b -> 0 with b * n = c fixed, g(s) = n sgn(s) log1p(b |s|) = c s - c b s |s| / 2 + O(b^2 s^3) -> c s, so SSA with
a small b and n = c / b is softmax at temperature 1 / c; with c = 1 a converted softmax model starts where its
source was (its logits within `MATCHED_TOLERANCE`) and becomes SSA only as far as training moves b and n.

What limits the match (measured by scripts/bench_matched_init.py, figures in docs/uptraining.md):
- the truncation c b s |s| / 2 of the logits: the difference to the source grows about linearly with b and with
  the square of the scores, so a model with large attention scores needs a smaller b;
- the declared ranges: n = c / b <= 1e4 means b >= 1e-4 (at c = 1), and n >= 1 means b <= c;
- bfloat16: a source run in bf16 already differs from itself in float32 by its own rounding; below b ~ 1e-3 the
  SSA model's difference is that rounding, so a smaller b buys nothing there.
`MATCHED_B` is the largest b whose float32 difference stayed below the bf16 rounding of the softmax source on every
family measured (it leaves training the shortest way to SSA's regime, b ~ 1 / |s|).
"""

from __future__ import annotations

import math
from typing import Any

from ..models.parameters import PARAMETER_LIMITS

MATCHED_B = 1e-3
MATCHED_C = 1.0
# max |logits - source logits| allowed at step 0, relative to max(1, max |source logits|)
MATCHED_TOLERANCE = 1e-2
INITS = ("config", "matched")


def matched_settings(b: float = MATCHED_B, c: float = MATCHED_C) -> dict[str, float]:
    """The SSA settings of a softmax-matched start: ssa_b_init = b, ssa_n_init = c / b, inside the declared ranges
    (b in [1e-4, 1e4], n in [1, 1e4]); raises ValueError saying which b to pick otherwise."""
    low, high = PARAMETER_LIMITS
    if not (isinstance(b, (int, float)) and math.isfinite(b) and b > 0):
        raise ValueError(f"matched init: b must be a positive number, got {b!r}")
    if not (isinstance(c, (int, float)) and math.isfinite(c) and c > 0):
        raise ValueError(f"matched init: c = b * n must be a positive number, got {c!r}")
    n = c / b
    if not (low <= b <= high) or not (1.0 <= n <= high):
        raise ValueError(f"matched init: b={b:g} gives n = c / b = {n:g}; b must be in [{max(low, c / high):g}, "
                         f"{min(high, c):g}] so that b is in [{low:g}, {high:g}] and n in [1, {high:g}]")
    return {"ssa_b_init": float(b), "ssa_n_init": float(n)}


def check_matched_request(attention_scoring, scoring_kwargs: dict[str, Any]) -> None:
    """Matched init sets b and n itself and is defined for SSA only."""
    if attention_scoring != "ssa":
        raise ValueError(f"init='matched' matches SSA to softmax; it needs attention_scoring='ssa', got "
                         f"{attention_scoring!r} (use init='config' for other scoring functions)")
    given = sorted({"ssa_b_init", "ssa_n_init"} & set(scoring_kwargs))
    if given:
        raise ValueError(f"init='matched' chooses ssa_b_init and ssa_n_init itself; drop {given} (pass matched_b "
                         f"/ --matched-b to choose b; n = 1 / b)")


def matched_tolerance(reference_max_abs: float) -> float:
    return MATCHED_TOLERANCE * max(1.0, reference_max_abs)


__all__ = ["INITS", "MATCHED_B", "MATCHED_C", "MATCHED_TOLERANCE", "check_matched_request", "matched_settings",
           "matched_tolerance"]
