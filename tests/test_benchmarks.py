"""The benchmark scripts the docs quote still run to their tables (a smoke
run, two submissions): a change that breaks a benchmark fails here, not when
someone next tries to reproduce a figure. No figure is asserted: timings
belong in docs/performance.md, measured on a quiet machine."""
import re
import subprocess
import sys

import pytest

from helpers import ROOT

pytestmark = pytest.mark.slow


def test_the_grading_benchmark_runs_to_its_table():
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_grading.py"), "--n", "2", "--workers", "2"],
                       cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    for row in ("serial `nbgrader autograde`", "`./course grade --workers 2`", "floor: `import jax` only",
                "throughput vs serial nbgrader", "per-submission time vs floor"):
        assert re.search(rf"^\|[^\n]*{re.escape(row)}[^\n]*\| [\d.]+ ?[sx] \|", r.stdout, re.M), (row, r.stdout)
