"""Mean and Student-t confidence interval across seeds (no scipy needed: the t distribution for integer degrees of
freedom has a closed-form CDF, inverted here by bisection)."""

from __future__ import annotations

import math
from typing import Sequence


def t_cdf(t: float, df: int) -> float:
    """P(T <= t) for Student's t with integer `df` >= 1 (closed form in theta = atan(t / sqrt(df)))."""
    if df < 1 or int(df) != df:
        raise ValueError(f"df must be a positive integer, got {df}")
    theta = math.atan(abs(t) / math.sqrt(df))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if df % 2 == 1:
        # P(|T| < |t|) = (2/pi) (theta + sin(theta) (cos + 2/3 cos^3 + 2*4/(3*5) cos^5 + ...)), terms up to cos^(df-2)
        total, term = 0.0, math.cos(theta)
        for k in range(1, (df - 1) // 2 + 1):
            total += term
            term *= c2 * (2 * k) / (2 * k + 1)
        central = 2 / math.pi * (theta + s * total) if df > 1 else 2 / math.pi * theta
    else:
        # P(|T| < |t|) = sin(theta) (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ...), terms up to cos^(df-2)
        total, term = 0.0, 1.0
        for k in range(1, df // 2 + 1):
            total += term
            term *= c2 * (2 * k - 1) / (2 * k)
        central = s * total
    return 0.5 + math.copysign(central / 2, t)


def t_quantile(p: float, df: int) -> float:
    """The p-quantile of Student's t with integer `df` (bisection on `t_cdf`)."""
    if not 0 < p < 1:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if p < 0.5:
        return -t_quantile(1 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        high *= 2
    for _ in range(200):
        mid = (low + high) / 2
        if t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
        if high - low < 1e-12 * max(1.0, high):
            break
    return (low + high) / 2


def mean_ci(values: Sequence[float], level: float = 0.95, bounds: tuple[float, float] | None = None) -> dict:
    """{"mean", "low", "high", "n", "values"}: the mean across seeds with a Student-t interval at `level`.

    With one value the interval is undefined (low = high = None). `bounds` clips the interval to the metric's
    range (an error rate cannot leave [0, 1]).
    """
    values = [float(v) for v in values]
    n = len(values)
    if n == 0:
        raise ValueError("mean_ci needs at least one value")
    mean = sum(values) / n
    if n == 1:
        return {"mean": mean, "low": None, "high": None, "n": 1, "values": values}
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    low, high = mean - half, mean + half
    if bounds is not None:
        low, high = max(bounds[0], low), min(bounds[1], high)
    return {"mean": mean, "low": low, "high": high, "n": n, "values": values}


def separated(a: dict, b: dict) -> int:
    """-1 if a's interval lies wholly below b's, +1 if wholly above, 0 if they overlap (or are undefined)."""
    if None in (a["low"], a["high"], b["low"], b["high"]):
        return 0
    if a["high"] < b["low"]:
        return -1
    if a["low"] > b["high"]:
        return 1
    return 0
