"""Start ipykernel in this process as a grading kernel: what `python -m
ipykernel_launcher` does, without ipykernel's debugger.

Every grading kernel starts here: forked (kernel_zygote.py), started under
the runtime audit (audit.main), or started with the audit off
(`python -P -m donation_course.grading.integrity.kernel_app`).

ipykernel's debugger serves Jupyter's visual debugger. Nobody attaches one
to a grading kernel, but ipykernel imports debugpy and pydevd to offer it:
about 0.1 s of each kernel's start, and a thread. A grading kernel starts
with debugpy's import refused, so ipykernel finds no debugger
(`ipykernel.debugger._is_debugpy_available` is False) and offers none. The
refusal ends once ipykernel has looked: a learner's own `import debugpy`
imports it as in any kernel.

A grading kernel that reads the course's compile cache also keeps what it
compiles in its own memory (kernel_compile_memo.py), so an answer that
clears its jit cache does not compile the same program again."""
from __future__ import annotations

import os
import sys


def launch(argv: list) -> None:
    """Run ipykernel with these arguments (`-f CONNECTION_FILE ...`) until it stops."""
    if sys.path and sys.path[0] in ("", os.getcwd()):
        del sys.path[0]  # as ipykernel_launcher: the working folder's files are not modules
    if "debugpy" not in sys.modules:
        sys.modules["debugpy"] = None  # the import system's own refusal: ModuleNotFoundError
        try:
            import ipykernel.debugger  # noqa: F401  (finds no debugpy, and says so once for this process)
        finally:
            if sys.modules.get("debugpy", False) is None:
                del sys.modules["debugpy"]
    from donation_course.grading.integrity import kernel_compile_memo

    kernel_compile_memo.install()
    sys.argv = [sys.argv[0] or "ipykernel_launcher", *argv]
    from ipykernel import kernelapp

    kernelapp.launch_new_instance()


if __name__ == "__main__":
    launch(sys.argv[1:])
