"""A real dask.distributed cluster on 127.0.0.1 for tests/test_cluster.py: a scheduler and
`./course worker` processes, each in its own session and folder, every process they start marked
in its environment, so that `Cluster.close` kills all of them (and their orphans) whatever happened;
and what the tests look for in its process tree."""
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil

from donation_course.grading.executors.zygote import kill_all
from helpers import COURSE_CMD, free_port, machine_load

# a grading kernel's process, at each step of its launch (kernel.py, bwrap, the kernel itself)
KERNEL_WORDS = ("grading.integrity.kernel", "bwrap", "ipykernel", "grading.integrity.audit")
MARKER = "DONATION_LAB_TEST_CLUSTER"  # in the environment of every process this module starts, and their children


class Cluster:
    def __init__(self, folder: Path, env: dict):
        self.folder, self.token = folder, uuid.uuid4().hex
        self.env = {**env, MARKER: self.token}
        self.procs: dict[str, subprocess.Popen] = {}
        self.address = f"tcp://127.0.0.1:{free_port()}"
        self.start("scheduler", [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                                 "--port", self.address.rsplit(":", 1)[1], "--no-dashboard", "--idle-timeout", "1800"])
        from distributed import Client

        self.client = Client(self.address, timeout=60, set_as_default=False)
        for name in ("w1", "w2"):
            self.start_worker(name)
        self.client.wait_for_workers(2, timeout=scaled(120))

    def start(self, name: str, cmd: list, env: dict | None = None) -> None:
        with open(self.folder / f"{name}.log", "w") as log:
            self.procs[name] = subprocess.Popen([str(c) for c in cmd], env=env or self.env, stdout=log,
                                                stderr=subprocess.STDOUT, start_new_session=True, cwd=self.folder)

    def start_worker(self, name: str, env: dict | None = None, cmd: list | None = None) -> None:
        """`./course worker`, one process and one thread (its defaults), its own folder; gone if the scheduler is."""
        cmd = cmd or [COURSE_CMD, "worker"]
        self.start(name, [*cmd, self.address, "--host", "127.0.0.1", "--local-directory", self.folder / name,
                          "--death-timeout", "60", "--name", name], env)

    def worker_address(self, name: str) -> str:
        return next(a for a, w in self.client.scheduler_info(n_workers=-1)["workers"].items() if w["name"] == name)

    def ours(self) -> list[psutil.Process]:
        """Every live process of this module's: the ones it started, their descendants, and any orphan."""
        roots = [p for p in psutil.process_iter() if environ(p).get(MARKER) == self.token]
        for proc in self.procs.values():
            try:
                roots.append(psutil.Process(proc.pid))
            except psutil.Error:
                pass
        found = {}
        for root in roots:  # (a sandboxed kernel's environment is its own: found as bwrap's descendant)
            try:
                found.update({p.pid: p for p in [root, *root.children(recursive=True)]})
            except psutil.Error:
                pass
        return list(found.values())

    def kill_group(self, name: str) -> None:
        """SIGKILL to a worker's process group (nanny and worker): its grading process, in a session of
        its own, and its kernels are left to notice on their own."""
        proc = self.procs.pop(name)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name)
        try:
            victims = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        except psutil.Error:
            victims = []
        kill_all(victims)
        proc.wait()

    def close(self) -> None:
        try:
            self.client.close()
        finally:
            kill_all(self.ours())
            for proc in self.procs.values():
                proc.wait()




def grading_processes(cluster: Cluster) -> list[psutil.Process]:
    """The workers' grading processes and their kernels (not dask's own processes, nor a worker's zygote)."""
    return [p for p in cluster.ours() if _name(p) != "dl-zygote"  # the worker's pre-imported grader stays
            and any(k in " ".join(_cmdline(p)) for k in ("grading.executors.zygote", *KERNEL_WORDS))]


def scratch_folders(cluster: Cluster, name: str) -> list[Path]:
    """The /tmp folders of a worker's grading processes (each logs beside the worker, under that name)."""
    return [Path("/tmp") / p.stem.removeprefix("grader-") for p in (cluster.folder / name).rglob("grader-dlc-*.log")]


def kernels_of(cluster: Cluster, name: str) -> list[psutil.Process]:
    """The kernels running under a worker (not a bwrap that only probes the sandbox at admission)."""
    try:
        tree = psutil.Process(cluster.procs[name].pid).children(recursive=True)
    except psutil.Error:
        return []
    return [p for p in tree if _name(p) == "dl-kernel"  # forked from the kernel zygote (kernel_zygote.py)
            or any(k in " ".join(_cmdline(p)) for k in ("grading.integrity.audit", "ipykernel"))]


def zygotes_of(cluster: Cluster, name: str) -> list[psutil.Process]:
    """A worker's zygote (zygote.py), which outlives a worker killed with SIGKILL long enough to clean up."""
    try:
        tree = psutil.Process(cluster.procs[name].pid).children(recursive=True)
    except psutil.Error:
        return []
    return [p for p in tree if _name(p) == "dl-zygote"]


def _name(p) -> str:
    try:
        return p.name()
    except psutil.Error:
        return ""


def _cmdline(p) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def describe(procs) -> list[str]:
    out = []
    for p in procs:
        try:
            out.append(f"{p.pid} (parent {p.ppid()}, {p.status()}): {' '.join(p.cmdline())[:150]}")
        except psutil.Error:
            pass
    return out


def scaled(seconds: float) -> float:
    """`seconds` stretched by how busy the machine is now (helpers.machine_load, at most 4x): a wait for a run,
    a worker or the scheduler to reach a state is for liveness, not a time budget, and a loaded machine only
    makes each step slower."""
    return seconds * min(4.0, machine_load())


def wait_for(predicate, timeout: float, what: str):
    """Poll `predicate` until it is true (and return its value) for `timeout` seconds, scaled with the load."""
    timeout = scaled(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what() if callable(what) else what}")


def environ(p) -> dict:
    try:
        return p.environ()
    except psutil.Error:
        return {}
