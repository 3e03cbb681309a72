"""Synthetic ICL run results (no training) for the statistics and report tests."""

SIGMAS = [1, 12, 29]
LENGTHS = [10, 200]


def cell(error: float) -> dict:
    return {"sequence_error": error, "individual_error": error / 10, "per_position": [error]}


def fake_run(scoring: str, seed: int, sigma_balanced: list[float], length_balanced: list[float], task: str = "every") -> dict:
    """One run whose standard-set cells are all 0 and whose balanced-set cells are the given errors."""
    return {
        "task": task,
        "scoring": scoring,
        "seed": seed,
        "eval": {
            "sigma_sweep": {"length": 21, "values": SIGMAS, "standard": [cell(0.0) for _ in SIGMAS],
                            "balanced": [cell(e) for e in sigma_balanced]},
            "length_sweep": {"sigma": 1.0, "values": LENGTHS, "standard": [cell(0.0) for _ in LENGTHS],
                             "balanced": [cell(e) for e in length_balanced]},
        },
    }


def ssa_better_at_large_sigma_worse_when_long(seeds: int = 10) -> list[dict]:
    """SSA: lower balanced error at sigma 12 and 29 in every seed, higher at 200 points in every seed."""
    runs = []
    for seed in range(seeds):
        wobble = seed / 1000  # distinct magnitudes: no tied differences
        runs.append(fake_run("softmax", seed, [0.02, 0.40 + wobble, 0.60 + wobble], [0.02, 0.10]))
        runs.append(fake_run("ssa", seed, [0.02, 0.10, 0.20], [0.02, 0.30 + 2 * wobble]))
    return runs
