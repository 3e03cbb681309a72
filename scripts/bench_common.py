"""Helpers shared by the benchmark scripts (bench_attention.py, bench_model.py): glibc malloc pinning, the
machine's busy fraction, comma-or-space separated options."""

import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

# where a long-running process's glibc malloc thresholds settle (REFERENCE section 5): without pinning them,
# tile buffers are mapped and zeroed afresh or not depending on the process's history
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "1073741824"}


def pin_malloc_env() -> None:
    """Re-execute this script with MALLOC_ENV unless it is set already."""
    if all(os.environ.get(k) == v for k, v in MALLOC_ENV.items()):
        return
    os.execve(sys.executable, [sys.executable] + sys.argv, {**os.environ, **MALLOC_ENV})


def split_args(values) -> list[str]:
    """["a,b", "c"] -> ["a", "b", "c"]."""
    out = []
    for value in values:
        out.extend(x for x in str(value).split(",") if x)
    return out


def busy_fraction(seconds: float = 1.0) -> float | None:
    """Fraction of CPU time the whole machine spent busy over `seconds` (0 = idle), from /proc/stat."""
    def read():
        values = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
        return sum(values), values[3] + values[4]

    try:
        t0, i0 = read()
        time.sleep(seconds)
        t1, i1 = read()
    except (OSError, IndexError, ValueError):
        return None
    return round(1.0 - (i1 - i0) / max(1, t1 - t0), 3)


class BusyProcesses:
    """N processes spinning `while True: pass` for the duration of a `with` block (what a data-loader worker or
    a second job does to the cores a kernel runs on)."""

    def __init__(self, count: int):
        self.count, self.procs = count, []

    def __enter__(self):
        # spins, and ends by itself when this process goes away (a killed benchmark leaves no spinner behind)
        spin = f"import os\nwhile os.getppid() == {os.getpid()}:\n    for _ in range(1000000): pass"
        self.procs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(self.count)]
        time.sleep(0.5 if self.count else 0.0)
        return self

    def __exit__(self, *exc):
        for proc in self.procs:
            proc.kill()
            proc.wait()


def ratio_text(ratio: dict | None, rounds: bool = False) -> str:
    """"0.95 [0.91, 0.99]" (with `rounds`, "... (n=12)"): a `paired_ratio` with its interval, or the median alone
    when there were too few rounds for one; "-" for no ratio."""
    if ratio is None:
        return "-"
    text = f"{ratio['median']:.2f}" + ("" if ratio["low"] is None else f" [{ratio['low']:.2f}, {ratio['high']:.2f}]")
    return text + (f" (n={ratio['rounds']})" if rounds else "")


def paired_ratio(baseline_times, times, level: float = 0.95) -> dict:
    """Speed of `times` relative to `baseline_times` (> 1: faster), paired by round: the round-k samples of the two
    ran back to back, so each ratio baseline_k / times_k sees one machine state.  Returns the median ratio and a
    distribution-free interval for it at (at least) `level` from the binomial order statistics (None when too few
    rounds), plus the number of rounds.  On a loaded machine this is steadier than a ratio of medians, whose two
    medians may come from different phases of the load."""
    ratios = sorted(b / t for b, t in zip(baseline_times, times))
    n = len(ratios)
    out = {"median": statistics.median(ratios), "low": None, "high": None, "rounds": n}
    # largest j with P(Binomial(n, 1/2) < j) <= (1 - level) / 2: [r_j, r_(n+1-j)] (1-based) covers the median
    cdf, j = 0.0, 0
    while j < n:
        nxt = cdf + math.comb(n, j) / 2 ** n
        if nxt > (1 - level) / 2:
            break
        cdf, j = nxt, j + 1
    if j >= 1:
        out["low"], out["high"] = ratios[j - 1], ratios[n - j]
    return out
