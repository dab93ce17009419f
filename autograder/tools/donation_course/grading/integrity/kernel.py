"""Kernel launcher used at grading time (the grading kernelspec's argv).

Outside the sandbox: reads its settings (settings.KernelSettings, one JSON
value in DONATION_LAB_KERNEL) and the student's folder
(DONATION_LAB_STUDENT_DIR: runtime/, and scratch/ for an unsandboxed
kernel's home), caps the kernel's address space, file size and core files,
builds the kernel's fixed environment (sandbox.fixed_env) and, when
sandboxed, starts bubblewrap (sandbox.py), which runs this module again
with --inner (or a holder, for a kernel forked from the zygote). Inside:
copies the working folder into its capped tmpfs, then starts the kernel
(a new session, the process cap, the sandbox uid instead of root, a normal
ipykernel) and waits for it, ending the sandbox if the launcher dies first
(_watch). A
submission that allocates too much gets a MemoryError in its own cell
instead of taking the machine (or the other workers) down.
"""
import json
import os
import resource
import shutil
import sys
from pathlib import Path

from ..run.kernel_settings import STUDENT_DIR_ENV, KernelSettings
from .lifetime import DiesWithThisProcess, die_with_starter


def set_limits(settings: KernelSettings) -> None:
    """The kernel's caps on address space, core files and file size (this process and what it starts)."""
    if settings.memory_mb > 0:
        limit = settings.memory_mb << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (settings.max_file_bytes, settings.max_file_bytes))


def _kernel(python: str, argv: list, audit: list) -> list:
    """The kernel's command: ipykernel (kernel_app.py) under the runtime audit (audit.py) unless `audit` is empty
    (the setting off); -P keeps the working folder off sys.path."""
    if not audit:
        return [python, "-P", "-m", "donation_course.grading.integrity.kernel_app", *argv]
    return [python, "-P", "-m", "donation_course.grading.integrity.audit", *audit, "--", *argv]


def _audit_channel(settings: KernelSettings, student_dir: Path) -> list:
    """Open this kernel's audit log (append-only, outside the sandbox) and a
    one-time pipe with its configuration; both fds pass to the kernel.
    Returns the audit arguments for the kernel's command."""
    import secrets

    key = secrets.token_bytes(32)
    log = student_dir / f"audit-{os.getpid()}.log"
    (student_dir / f"audit-{os.getpid()}.key").write_text(key.hex())
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    read, write = os.pipe()
    from .audit import END_ENV, end_digests

    token = os.environ.get(END_ENV, "")  # the grader's last cell's token (audit_log.MarkNotebookEnd): only digests pass
    config = json.dumps({"key": key.hex(), "trusted": list(settings.trusted_cells),
                         "allowed": list(settings.allowed_modules),
                         "end": end_digests(token) if token else []}).encode()
    if len(config) > 60000:
        raise RuntimeError("the audit configuration does not fit a pipe's buffer")
    os.write(write, config)
    os.close(write)
    for kept in (fd, read):
        os.set_inheritable(kept, True)
    return ["--audit-fd", str(fd), "--config-fd", str(read)]


def inner(argv: list) -> None:
    """In the sandbox, still root: start the kernel (its own session, the process cap, the sandbox uid) and wait
    for it (_watch). argv: --nproc N --lifeline FD, the audit arguments up to --, then the kernel's own arguments."""
    import signal

    from .sandbox import become_sandbox_uid, fill_working_folder

    nproc, lifeline, rest = int(argv[1]), int(argv[3]), argv[4:]
    audit, argv = rest[:rest.index("--")], rest[rest.index("--") + 1:]  # (no audit arguments: audit off)
    fill_working_folder(os.getcwd())
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # (an ignored SIGCHLD, inherited, would reap the kernel unseen)
    kernel = os.fork()
    if kernel == 0:
        try:
            os.close(lifeline)
            # its own session and process group, as a forked kernel's: ipykernel's interrupt signals its group
            os.setsid()
            become_sandbox_uid(os.path.dirname(argv[argv.index("-f") + 1]), nproc)
            os.execv(sys.executable, _kernel(sys.executable, argv, audit))
        finally:
            os._exit(127)
    os._exit(_watch(kernel, lifeline))


def _watch(kernel: int, lifeline: int) -> int:
    """The sandbox's first process (bwrap's init aside) while its kernel runs: returns the kernel's exit status,
    which bwrap passes on to the launcher; ends the whole sandbox at once if the launcher outside dies first (its
    end of the `lifeline` pipe closes).

    The parent-death signals (lifetime.py) take a sandbox down with its launcher once bwrap has set it up, but
    bwrap's init asks for its own only after mounting the sandbox: a launcher killed in between (its grading
    process stopped by Ctrl-C as it started a kernel) would leave the sandbox and its kernel running for good.
    A kernel forked from the zygote has the same guard in the sandbox's holder (_holder)."""
    import ctypes
    import select
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # (a terminal's Ctrl-C is the grader's to handle, not this one's)
    ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: not traceable, even by its own uid
    try:
        pidfd = os.pidfd_open(kernel)
    except (OSError, AttributeError):  # (Linux before 5.3, or a seccomp profile that refuses it)
        pidfd = None
    poller = select.poll()
    poller.register(lifeline, select.POLLIN)  # the launcher's end closed: POLLHUP
    if pidfd is not None:
        poller.register(pidfd, select.POLLIN)
    while True:
        ready = {fd for fd, _ in poller.poll(None if pidfd is not None else 200)}
        if lifeline in ready:
            # every process of this sandbox's PID namespace but its init and this one (pid 2 under bwrap's
            # init: outside a PID namespace of its own, only the kernel)
            os.kill(-1 if os.getpid() == 2 else kernel, signal.SIGKILL)
            return 128 + signal.SIGKILL
        done, status = os.waitpid(kernel, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            return code if code >= 0 else 128 - code  # a signal's death as a shell reports it (and bwrap does)


def _connection(argv: list, runtime: Path) -> list:
    """Copy the connection file into the student's runtime folder (the only
    folder the sandbox shares with the grader),
    with the ipc socket path made absolute there. Returns argv pointing at the copy."""
    i = argv.index("-f") + 1
    info = json.loads(Path(argv[i]).read_text())
    if info.get("transport") == "ipc" and not os.path.isabs(info.get("ip", "")):
        info["ip"] = str(runtime / info["ip"])
    dest = runtime / "connection.json"
    dest.write_text(json.dumps(info))
    return [*argv[:i], str(dest), *argv[i + 1:]]


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["--inner"]:
        return inner(argv[1:])
    # SIGKILL this launcher when the grading process that started it dies, however it dies (bwrap, which it
    # starts, dies with it and takes the sandbox along; an unsandboxed kernel, which it becomes by exec, keeps the
    # signal). Without it, a grader killed mid-notebook (a cluster worker's, with its worker) would leave the
    # kernel running.
    die_with_starter()
    from .sandbox import SANDBOX_UID, bwrap_argv, fixed_env, font_list, unsandboxed_env, venv_python

    settings = KernelSettings.from_environment()
    student_dir = Path(os.environ[STUDENT_DIR_ENV])
    runtime, scratch = student_dir / "runtime", student_dir / "scratch"  # scratch: unsandboxed kernels only
    set_limits(settings)
    cwd = os.getcwd()
    argv = _connection(argv, runtime)
    audit = _audit_channel(settings, student_dir) if settings.audit else []
    cache = settings.compile_cache
    fonts = settings.fonts if settings.fonts and os.path.isfile(settings.fonts) else \
        font_list(student_dir.parent / "fonts")  # the course's; else (a cluster's worker) this worker's own
    if not settings.sandbox:  # same environment, no sandbox: home, ipython and tmp files in the scratch folder
        scratch.mkdir(parents=True, exist_ok=True)
        if fonts:
            (scratch / "mpl").mkdir(exist_ok=True)
            shutil.copy(fonts, scratch / "mpl")
        os.execve(sys.executable, _kernel(sys.executable, argv, audit),
                  unsandboxed_env(str(scratch), cache=cache, draw_seed=settings.draw_seed))
    if os.getuid() == 0:  # the kernel (the sandbox uid) reads its connection file, makes its sockets
        os.chown(runtime / "connection.json", SANDBOX_UID, SANDBOX_UID)
        os.chown(runtime, SANDBOX_UID, SANDBOX_UID)
    cmd = bwrap_argv(cwd, str(runtime), settings.disk_bytes, extra_ro=[cache] if cache else [], fonts=fonts)
    env = fixed_env(home=cwd, cache=cache, draw_seed=settings.draw_seed)
    for key, value in env.items():
        cmd += ["--setenv", key, value]
    if settings.zygote:  # fork the kernel from the grading process's kernel zygote (kernel_zygote.py)
        code = _run_forked(cmd, settings, cwd, argv, audit, env,
                           json.loads((runtime / "connection.json").read_text()))
        if code is not None:
            sys.exit(code)
    python = venv_python()
    info, info_w = os.pipe()
    lifeline, lifeline_w = os.pipe()  # this launcher alone holds the write end, until it ends (_watch)
    cmd += ["--info-fd", str(info_w), "--", python, "-m", "donation_course.grading.integrity.kernel", "--inner",
            "--nproc", str(settings.max_processes), "--lifeline", str(lifeline), *audit, "--", *argv]
    sys.exit(_run_sandbox(cmd, info, info_w, json.loads((runtime / "connection.json").read_text()),
                          [lifeline, *(int(a) for a in audit[1::2])]))


def _holder() -> list:
    """What bwrap runs in a sandbox whose kernel is forked in: a program that echoes its stdin (a pipe from this
    launcher) to its stdout (another), until its stdin closes. The launcher's first line coming back says the
    sandbox is made (bwrap names its process before it has mounted anything): `cat`, where the system has
    it under /usr (bound into the sandbox)."""
    cat = shutil.which("cat", path="/usr/bin:/bin")
    if cat and os.path.realpath(cat).startswith("/usr/"):
        return [os.path.realpath(cat)]
    from .sandbox import venv_python
    return [venv_python(), "-I", "-S", "-c", "import shutil, sys; shutil.copyfileobj(sys.stdin.buffer, "
            "sys.stdout.buffer, 1)"]


def _run_forked(bwrap: list, settings: KernelSettings, cwd: str, argv: list, audit: list, env: dict,
                connection: dict):
    """The sandbox as bwrap makes it, holding a kernel the zygote forks into it (kernel_zygote.py). Returns the
    kernel's exit status, or None, having started nothing, when the zygote cannot be reached."""
    import subprocess

    from .kernel_zygote import connect, request_kernel
    from .sandbox import link_sockets

    try:
        conn = connect(settings.zygote)
    except OSError:
        return None
    hold, hold_w = os.pipe()
    echo, echo_w = os.pipe()
    info, info_w = os.pipe()
    proc = subprocess.Popen([*bwrap, "--info-fd", str(info_w), "--", *_holder()], stdin=hold, stdout=echo_w,
                            pass_fds=[info_w], preexec_fn=DiesWithThisProcess())  # bwrap takes the sandbox along
    for fd in (hold, echo_w, info_w):
        os.close(fd)
    with os.fdopen(info, "rb") as fh:
        text = fh.read()
    os.write(hold_w, b"made?\n")
    with os.fdopen(echo, "rb") as fh:
        made = fh.readline() == b"made?\n"  # the holder runs: every mount of the sandbox is in place
    try:
        sandbox = int(json.loads(text)["child-pid"])
    except (ValueError, KeyError):
        made = False
    if not made:
        os.close(hold_w)
        return proc.wait() or 1  # bwrap could not set the sandbox up: it says why and exits
    link_sockets(connection, sandbox)
    fds = [int(a) for a in audit[1::2]]
    request = {"sandbox_pid": sandbox, "cwd": cwd, "argv": argv, "env": env, "audit": bool(audit),
               "settings": settings.to_json()}
    try:
        code = request_kernel(conn, request, [0, 1, 2, *fds])
    finally:
        for fd in fds:
            os.close(fd)
        conn.close()
        os.close(hold_w)  # the holder ends, and with it the sandbox
        proc.wait()
    return code


def _run_sandbox(cmd: list, info: int, info_w: int, connection: dict, fds: list) -> int:
    """Run bwrap (which dies with this launcher), link the kernel's sockets into the real runtime folder once
    bwrap says which process is the sandbox's (--info-fd), and return bwrap's exit status."""
    import subprocess

    from .sandbox import link_sockets

    proc = subprocess.Popen(cmd, pass_fds=[info_w, *fds], preexec_fn=DiesWithThisProcess())
    os.close(info_w)
    for fd in fds:
        os.close(fd)  # the kernel holds them now
    with os.fdopen(info, "rb") as fh:
        text = fh.read()
    try:
        link_sockets(connection, int(json.loads(text)["child-pid"]))
    except (ValueError, KeyError, OSError):
        pass  # bwrap could not set the sandbox up: it says why and exits
    return proc.wait()


if __name__ == "__main__":
    main()
