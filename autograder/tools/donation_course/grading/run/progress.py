"""The run's progress bar: tqdm's, on stderr, without its monitor thread.

tqdm starts a monitor thread with its first bar by default; the grading
workers are forked from the run's process, which must run one thread then
(pool.py)."""
import sys


def progress_bar(total: int):
    from tqdm import tqdm

    tqdm.monitor_interval = 0
    return tqdm(total=total, unit="student", desc="grading", file=sys.stderr)


class NoProgress:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass
