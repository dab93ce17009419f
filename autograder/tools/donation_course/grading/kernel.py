"""Kernel launcher used at grading time (the grading kernelspec's argv).

Outside the sandbox: caps the kernel's address space (RLIMIT_AS, from
DONATION_LAB_MEMORY_MB), file size and core files, builds the kernel's fixed
environment (sandbox.fixed_env) and, unless DONATION_LAB_SANDBOX is "0",
copies the working folder into the submission's scratch folder and exec's
bubblewrap (sandbox.py), which runs this module again with --inner. Inside:
caps the process count and drops root for the sandbox uid, then exec's a
normal ipykernel. A submission that allocates too much gets a MemoryError in
its own cell instead of taking the machine (or the other workers) down.
"""
import os
import resource
import sys


def _limits() -> None:
    mb = int(os.environ.get("DONATION_LAB_MEMORY_MB", "0") or 0)
    if mb > 0:
        limit = mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    from .sandbox import MAX_FILE_BYTES

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))


def _kernel(argv) -> list:
    return [sys.executable, "-m", "ipykernel_launcher", *argv]


def inner(argv) -> None:
    """In the sandbox, still root: cap processes, become the sandbox uid, start the kernel."""
    from .sandbox import MAX_PROCESSES, SANDBOX_UID

    if os.getuid() == 0:
        resource.setrlimit(resource.RLIMIT_NPROC, (MAX_PROCESSES, MAX_PROCESSES))
        os.setgroups([])
        os.setresgid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID)
        os.setresuid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID)
    os.execv(sys.executable, _kernel(argv))


def _connection(argv) -> list:
    """Copy the connection file into this kernel's runtime folder
    (DONATION_LAB_RUNTIME, made by the worker for this student: the only
    folder besides the scratch one that the sandbox shares with the grader),
    with the ipc socket path made absolute there. The client resolves the
    relative name jupyter_client gives it in its working folder, which the
    worker sets to that same folder. Returns argv pointing at the copy."""
    import json
    from pathlib import Path

    i = argv.index("-f") + 1
    runtime = Path(os.environ["DONATION_LAB_RUNTIME"])
    src = Path(argv[i])
    info = json.loads(src.read_text())
    if info.get("transport") == "ipc" and not os.path.isabs(info.get("ip", "")):
        info["ip"] = str(runtime / info["ip"])
    dest = runtime / "connection.json"
    dest.write_text(json.dumps(info))
    return [*argv[:i], str(dest), *argv[i + 1:]]


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["--inner"]:
        return inner(argv[1:])
    from .sandbox import SANDBOX_UID, bwrap_argv, fixed_env, prepare_scratch, unsandboxed_env

    _limits()
    cwd = os.getcwd()
    argv = _connection(argv)
    runtime = os.environ["DONATION_LAB_RUNTIME"]
    conn = os.path.join(runtime, "connection.json")
    sandboxed = os.environ.get("DONATION_LAB_SANDBOX", "1") != "0"
    cache = os.environ.get("DONATION_LAB_COMPILE_CACHE", "")
    scratch = os.environ["DONATION_LAB_SCRATCH"]
    if not sandboxed:  # same environment, no sandbox: home, ipython and tmp files in the scratch folder
        os.makedirs(scratch, exist_ok=True)
        os.execve(sys.executable, _kernel(argv), unsandboxed_env(scratch, cache=cache))
    env = fixed_env(home=cwd, cache=cache)
    prepare_scratch(cwd, scratch)
    if os.getuid() == 0:  # the kernel (the sandbox uid) reads its connection file, makes its sockets
        os.chown(conn, SANDBOX_UID, SANDBOX_UID)
        os.chown(runtime, SANDBOX_UID, SANDBOX_UID)
    cmd = bwrap_argv(cwd, str(scratch), runtime, extra_ro=[cache] if cache else [])
    for key, value in env.items():
        cmd += ["--setenv", key, value]
    cmd += ["--", sys.executable, "-m", "donation_course.grading.kernel", "--inner", *argv]
    os.execvp("bwrap", cmd)


if __name__ == "__main__":
    main()
