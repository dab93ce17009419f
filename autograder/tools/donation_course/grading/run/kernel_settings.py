"""What the kernel launcher (integrity/kernel.py) needs of the run's settings: `KernelSettings`, one JSON value
in one environment variable. Apart from settings.py, whose traitlets the launcher, a Python started for every
kernel, would otherwise import (about 0.03 s of its 0.06 s)."""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

# The launcher's two environment variables: the kernel settings (JSON), and
# the folder of the student being graded (runtime/ for the connection file
# and sockets, scratch/ for the working folder's copy).
KERNEL_SETTINGS_ENV = "DONATION_LAB_KERNEL"
STUDENT_DIR_ENV = "DONATION_LAB_STUDENT_DIR"


@dataclass(frozen=True)
class KernelSettings:
    """What the kernel launcher needs, serialised into one environment variable."""

    memory_mb: int
    max_processes: int
    max_file_bytes: int
    disk_bytes: int   # each of the working folder's and /tmp's tmpfs
    sandbox: bool
    audit: bool
    compile_cache: str  # the folder to read compiled programs from, or ""
    trusted_cells: tuple = ()    # the course's own cells, by ipykernel's hash (audit_log.trusted_cells)
    allowed_modules: tuple = ()  # what learner code may import (scan_policy.ALLOWED_MODULES)
    fork: bool = True             # sandboxed kernels forked from the grading process's kernel zygote
    zygote: str = ""              # that zygote's socket, once the grading process has started it
    draw_seed: str = ""           # the course's secret for what the hidden checks draw (prepare.draw_secret)
    fonts: str = ""               # matplotlib's font list, built once for the course (sandbox.course_font_list)
    referee_programs: str = ""    # the referee's compiled programs, kept for the course (referee/compiled.py)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> KernelSettings:
        data = json.loads(text)
        return cls(**{**data, "trusted_cells": tuple(data.get("trusted_cells", ())),
                      "allowed_modules": tuple(data.get("allowed_modules", ()))})

    @classmethod
    def from_environment(cls) -> KernelSettings:
        return cls.from_json(os.environ[KERNEL_SETTINGS_ENV])
