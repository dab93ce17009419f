"""Every setting of a grading run, in one object.

`GradingSettings` is a traitlets Configurable, as nbgrader's own options
are: a course sets defaults in its `nbgrader_config.py`

    c.GradingSettings.timeout = 600
    c.GradingSettings.memory_mb = 4096

and `./course grade`'s flags override them for one run (cli.py). A new
limit or sandbox cap is a trait here; the kernel launcher (kernel.py)
receives the part it needs as one JSON value (`KernelSettings`), never as
a bundle of environment variables.
"""
from __future__ import annotations

import os
from pathlib import Path

from traitlets import Bool, Int, Unicode
from traitlets.config import Configurable

from .kernel_settings import KERNEL_SETTINGS_ENV, STUDENT_DIR_ENV, KernelSettings  # noqa: F401  (the run's too)


def available_cores(cgroup: Path = Path("/sys/fs/cgroup")) -> int:
    """Cores this process may use: its CPU affinity, then a cgroup quota (a hub
    pod's CPU limit): cgroup v2's cpu.max, or v1's cpu.cfs_quota_us over
    cpu.cfs_period_us; a fraction of a core counts as one."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    for quota_file, period_file in ((cgroup / "cpu.max", None),
                                    (cgroup / "cpu" / "cpu.cfs_quota_us", cgroup / "cpu" / "cpu.cfs_period_us")):
        try:
            if period_file is None:
                quota, period = quota_file.read_text().split()
            else:
                quota, period = quota_file.read_text().strip(), period_file.read_text().strip()
            if quota not in ("max", "-1"):
                cores = min(cores, max(1, int(quota) // int(period)))
            break
        except (OSError, ValueError):
            continue
    return max(1, cores)


class GradingSettings(Configurable):
    """Limits, sandbox caps, workers and paths of `./course grade`."""

    # --- scale
    workers = Int(0, help="Parallel grading workers (0: the cores this process may use).").tag(config=True)
    scheduler = Unicode("", help="A running dask.distributed scheduler (tcp://HOST:PORT) to grade on, with "
                        "`./course worker` processes; '' grades on this machine (cluster.py).").tag(config=True)
    # --- time
    timeout = Int(300, help="Seconds per whole submission.").tag(config=True)
    cell_timeout = Int(0, help="Seconds per cell (0: the course's Execute.timeout, at most `timeout`).").tag(
        config=True)
    # --- the kernel's caps (kernel.py and sandbox.py apply them)
    memory_mb = Int(3072, help="Address-space limit of each grading kernel, in MiB.").tag(config=True)
    max_processes = Int(256, help="Processes and threads of a sandboxed kernel (RLIMIT_NPROC).").tag(config=True)
    max_file_mb = Int(256, help="Largest file a kernel may write, in MiB (RLIMIT_FSIZE).").tag(config=True)
    max_output_bytes = Int(1 << 20, help="Stream and rich output one notebook may print.").tag(config=True)
    disk_mb = Int(256, help="Size of a sandboxed kernel's working folder and of its /tmp, in MiB each.").tag(
        config=True)
    sandbox = Bool(True, help="Run grading kernels in bubblewrap's sandbox.").tag(config=True)
    audit = Bool(True, help="Run grading kernels under the runtime audit (audit.py); off only to measure "
                 "its cost: every row then says 'audit off'.").tag(config=True)
    compile_cache = Bool(True, help="Let grading kernels read the course's JAX compile cache.").tag(config=True)
    fork_kernels = Bool(True, help="Fork each sandboxed kernel from a process that has imported JAX once "
                        "(integrity/kernel_zygote.py) instead of starting a new Python in the sandbox; off "
                        "only to measure what it saves.").tag(config=True)
    # --- input and output
    lms = Unicode("", help="The export's file naming (an LMS of grading/lms/; '' detects it).").tag(config=True)
    name_regex = Unicode("", help="Any other naming: a FileNameCollectorPlugin.named_regexp.").tag(config=True)
    out = Unicode("", help="Where grades.csv and feedback/ go ('' for COURSE/.grading).").tag(config=True)
    canvas_column = Unicode("", help="The assignment column of canvas-import.csv, as Canvas names it.").tag(
        config=True)
    # --- the LMS import files (exports.py) and the LMS's times (lms.py)
    lms_points = Unicode("submitted", help="What the LMS import files' grade counts: 'submitted' (the notebooks "
                         "the class handed in), 'all' (every notebook of the assignment), 'exercise' (the graded "
                         "exercise's notebook alone), or notebook names separated by commas; nbgrader's late "
                         "penalty of those notebooks is taken off.").tag(config=True)
    blackboard_column = Unicode("", help="The Grade Center column of blackboard-import.csv as Blackboard's "
                                "download names it ('Title [Total Pts: 100 Score] |123456'), or that download "
                                "file to read it from.").tag(config=True)
    moodle_column = Unicode("", help="The grade column of moodle-grades.csv as Moodle's grades export names it "
                            "('Assignment: Title (Real)'), or that export file to read it from.").tag(config=True)
    lms_title = Unicode("", help="The assignment's title in the LMS, to pick its column from the LMS's gradebook "
                        "download ('' is the assignment's folder name).").tag(config=True)
    lms_files = Unicode("", help="The LMSes to write import files for, separated by commas (canvas, moodle, "
                        "blackboard); '' for the LMS the export came from, or every LMS for nbgrader or flat ids."
                        ).tag(config=True)
    timezone = Unicode("", help="The zone of an LMS's local times (Blackboard's attempt times, a --name-regex's "
                       "timestamp), e.g. 'Europe/Berlin'; '' is the course's nbgrader timezone "
                       "(c.Exchange.timezone), else UTC.").tag(config=True)
    progress = Bool(True, help="Show a progress bar.").tag(config=True)

    def validate(self) -> None:
        """Raise ValueError naming the first setting out of range."""
        for name in ("timeout", "memory_mb", "max_processes", "max_file_mb", "max_output_bytes", "disk_mb"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1")
        if self.workers < 0:
            raise ValueError("--workers must be at least 1")
        if self.cell_timeout < 0:
            raise ValueError("--cell-timeout must be at least 1")

    def worker_count(self) -> int:
        return self.workers or available_cores()

    def cell_seconds(self, course_default: int) -> int:
        return min(self.cell_timeout or course_default, self.timeout)

    def output_folder(self, course) -> Path:
        """`out`, else the course's grading folder (Course.grading_dir)."""
        return (Path(self.out) if self.out else course.grading_dir).resolve()

    def kernel(self, compile_cache: str, trusted_cells=(), allowed_modules=(), draw_seed: str = "",
               fonts: str = "", referee_programs: str = "") -> KernelSettings:
        return KernelSettings(memory_mb=self.memory_mb, max_processes=self.max_processes,
                              max_file_bytes=self.max_file_mb << 20, disk_bytes=self.disk_mb << 20,
                              sandbox=self.sandbox, audit=self.audit, compile_cache=compile_cache,
                              fork=self.fork_kernels, draw_seed=draw_seed, fonts=fonts,
                              referee_programs=referee_programs,
                              trusted_cells=tuple(trusted_cells), allowed_modules=tuple(allowed_modules))
