"""What a cluster run writes down: logs/cluster.log (the run, its workers, one line of figures per
submission, and at the end the p50 and p95 of each), and logs/cluster-workers/<worker>.log (each
worker's nbgrader log, a part per student)."""
from __future__ import annotations

import math
import sys
import time
from pathlib import Path

# figure -> (label, unit, scale) in the summary
FIGURES = {"wait": ("queue wait", "s", 1), "wall": ("grading", "s", 1), "cpu": ("core-seconds", "", 1),
           "rss": ("peak RSS", " MiB", 2**-20)}


def say(line: str) -> None:
    from tqdm import tqdm

    tqdm.write(line, file=sys.stderr)  # above the progress bar, not through it


def percentile(values: list[float], p: float) -> float:
    """The nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)] if ordered else float("nan")


class ClusterLog:
    def __init__(self, logs: Path):
        self.path, self.workers = logs / "cluster.log", logs / "cluster-workers"
        self.workers.mkdir(parents=True, exist_ok=True)
        self.rows: list[dict] = []

    def line(self, text: str) -> None:
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}\n")

    def worker_log(self, worker: str, student: str, attempt: int, text: str) -> None:
        name = worker.split("://")[-1].replace(":", "-").replace("/", "-") or "unknown"
        with open(self.workers / f"{name}.log", "a", encoding="utf-8") as fh:
            fh.write(f"--- {student} (attempt {attempt})\n{text}\n")

    def submission(self, figures: dict, status: str) -> None:
        """student, worker, attempt, sent and returned bytes, wait, wall, cpu (core-seconds), rss (bytes)."""
        self.rows.append(figures)
        self.line(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in figures.items())
                  + f" status={status}")

    def summary(self, workers: int, refused: int, bundle_bytes: int, bundles_sent: int) -> str:
        rows, parts = self.rows, []
        for key, (label, unit, scale) in FIGURES.items():
            values = [r[key] * scale for r in rows if isinstance(r.get(key), int | float)]
            if values:
                parts.append(f"{label} p50 {percentile(values, 50):.2f}{unit} p95 {percentile(values, 95):.2f}{unit}")
        if rows:
            parts.append(f"per task sent {sum(r['sent'] for r in rows) / len(rows) / 1e3:.1f} kB, returned "
                         f"{sum(r['returned'] for r in rows) / len(rows) / 1e3:.1f} kB")
        parts.append(f"course bundle {bundle_bytes / 1e3:.0f} kB sent to {bundles_sent} worker(s)")
        return (f"cluster: {len(rows)} submission(s) on {workers} worker(s)"
                + (f", {refused} refused" if refused else "") + "; " + "; ".join(parts))
