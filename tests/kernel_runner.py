"""Grading kernels for tests/test_sandbox.py, started the way a grading
process starts them, from one process that lives as long as the test process
that asked for it: like a worker grading a class, it makes the kernelspec
once and keeps one kernel zygote, which imports JAX once; each kernel is
still a new sandbox, forked from that zygote or started as a new Python.

    python kernel_runner.py END_TOKEN [COMPILE_CACHE]

reads one JSON request a line on stdin,
    {"cwd": folder, "cells": [source, ...], "trusted": [source, ...],
     "forked": bool, "audit": bool}
and answers each on the stdout it started with, in one JSON line:
    {"out": the cells' outputs, "audit": [{"records": [...], "bad": [...]}, ...]}
or {"error": a traceback}. Whatever the kernels print goes to stderr.
A zygote's compile cache is fixed when it starts, so a runner has one cache
(none by default) for all its kernels."""
import atexit
import contextlib
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import traceback
from dataclasses import replace
from pathlib import Path


class KernelRunner:
    """The test process's side: starts the runner on first use (again if it died), sends one request at a
    time, and stops it when the test process ends (or when an answer takes longer than `timeout`)."""

    def __init__(self, token: str, cache: str = "", timeout: float = 180):
        self.token, self.cache, self.timeout = token, cache, timeout
        self.proc = None
        self.log = None
        atexit.register(self.close)

    def run(self, request: dict) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self.log = tempfile.TemporaryFile()
            self.proc = subprocess.Popen([sys.executable, __file__, self.token, self.cache], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=self.log, text=True)
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            answered, _, _ = select.select([self.proc.stdout], [], [], self.timeout)
            line = self.proc.stdout.readline() if answered else ""
        except BaseException:  # never a reply left over for the next test's request
            self.close()
            raise
        if not line:
            said = self.stderr_tail()
            self.close()
            if not answered:  # conftest reports a TimeoutError with the machine's load
                raise TimeoutError(f"the kernel runner gave no answer in {self.timeout} s:\n{said}")
            raise AssertionError(f"the kernel runner ended without an answer:\n{said}")
        reply = json.loads(line)
        assert "error" not in reply, reply.get("error", "") + self.stderr_tail()
        return reply

    def stderr_tail(self) -> str:
        self.log.seek(0)
        return self.log.read()[-3000:].decode(errors="replace")

    def close(self) -> None:
        """End the runner: at the end of its input it removes its folders and stops its zygote; killed if it
        has not within 10 s."""
        if self.proc is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


def main(token: str, cache: str) -> None:
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # the kernels' own output never mixes with the replies

    from jupyter_client.manager import KernelManager

    from donation_course.grading.executors.worker import (
        KERNEL_NAME,
        make_kernelspec,
        new_student_dir,
        spawn_kernel_zygote,
        use_kernel_settings,
    )
    from donation_course.grading.integrity.audit_log import parsed_digests, read_records
    from donation_course.grading.integrity.scan import ALLOWED_MODULES
    from donation_course.grading.run.settings import GradingSettings, KernelSettings

    tmp = Path(tempfile.mkdtemp(prefix="dlt-", dir="/tmp"))
    os.environ["DONATION_LAB_AUDIT_END"] = token  # as audit_log.MarkNotebookEnd sets it
    os.environ["JUPYTER_PATH"] = str(make_kernelspec(tmp / "jupyter", sys.executable))
    zygote_started = False
    try:
        for count, line in enumerate(sys.stdin):
            request = json.loads(line)
            base = tmp / f"w{count}"
            try:
                trusted = sorted(set().union(set(), *(parsed_digests(s) for s in request["trusted"])))
                grading = GradingSettings(memory_mb=3072, fork_kernels=request["forked"], audit=request["audit"])
                use_kernel_settings(grading.kernel(cache, trusted, sorted(ALLOWED_MODULES)))
                if request["forked"] and not zygote_started:
                    spawn_kernel_zygote(KernelSettings.from_environment(), str(tmp))
                    zygote_started = True
                runtime = new_student_dir(base)
                if not request["forked"]:  # started as a new Python, though this process has a zygote
                    use_kernel_settings(replace(KernelSettings.from_environment(), zygote=""))
                elif not KernelSettings.from_environment().zygote:  # never a started kernel in its place
                    raise RuntimeError("a forked kernel was asked for, and this runner's zygote is not ready")
                reply = {"out": run_cells(KernelManager, KERNEL_NAME, runtime, request["cwd"], request["cells"])}
                reply["audit"] = []
                for log in sorted(base.glob("audit-*.log")):
                    records, bad = read_records(log, bytes.fromhex(log.with_suffix(".key").read_text()))
                    reply["audit"].append({"records": records, "bad": bad})
            except Exception:
                reply = {"error": traceback.format_exc()}
            finally:
                shutil.rmtree(base, ignore_errors=True)
            replies.write(json.dumps(reply) + "\n")
            replies.flush()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_cells(kernel_manager, kernel_name: str, runtime: Path, cwd: str, cells: list) -> str:
    km = kernel_manager(kernel_name=kernel_name, transport="ipc")
    km.ip = str(runtime / "kernel-ipc")
    km.start_kernel(cwd=cwd)
    out = []
    kc = km.client()
    try:
        kc.start_channels()
        kc.wait_for_ready(timeout=60)
        for cell in cells:
            kc.execute_interactive(
                cell, timeout=60,
                output_hook=lambda m: out.append(m["content"].get("text") or m["content"].get("evalue") or ""))
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    return "".join(out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "")
