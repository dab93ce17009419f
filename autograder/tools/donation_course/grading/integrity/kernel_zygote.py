"""The kernel zygote: sandboxed grading kernels forked from a Python that has already imported JAX.

A grading kernel used to start a new Python inside each student's sandbox and import ipykernel and JAX
there: about 1.2 s of a core per student, a third of a submission's cost. Each grading process now starts
one zygote (`python -P -m donation_course.grading.integrity.kernel_zygote SOCKET PARENT_PID`, in the kernel's fixed
environment, outside any sandbox). It imports ipykernel, JAX and NumPy once, stays one thread, and serves
the kernel launchers of its grading process over a unix socket in the grading process's private folder.

The sandbox itself is made exactly as before, by bubblewrap (kernel.py, sandbox.py): the launcher starts
bwrap with a holder (`cat` on a pipe) instead of a Python, and asks the zygote for a kernel in it, handing
over the sandbox's process id, the working folder, the kernel's arguments and its file descriptors
(stdin/stdout/stderr and the audit's two). The zygote forks a child, which:

- joins every namespace of the sandbox (`setns` on /proc/PID/ns/*: its user namespace first when bwrap made
  one, then mount, PID, network, IPC, UTS and cgroup), so that its root, its /proc, its network and its
  files are the sandbox's and nothing else; then forks the kernel, the first of its processes inside the
  sandbox's PID namespace, and waits for it, telling the launcher how it ended;
- the kernel: a new session, dies with its parent, fills the working folder, caps address space, file size,
  core files and (as root) processes, drops root for the sandbox uid and every capability, is made
  dumpable as an exec'd process is, reseeds NumPy's random state (Python's reseeds itself), closes every descriptor it
  was not given, takes the environment the launcher would have given it, installs the runtime audit and
  its exec filter (audit.py) and starts ipykernel: the same steps, in the same order, as
  kernel.py's inner step and audit.main.

What the zygote imported is trusted code, imported with nothing of a student's around; a forked kernel
shares its pages until it writes them. Nothing secret lives in the zygote: the audit's key reaches the
kernel through its own pipe, as before. The kernel dies with the sandbox (when bwrap's init in the PID
namespace ends, the kernel ends) and the sandbox with its launcher, so jupyter_client's kill of the
launcher still takes everything down. A launcher that cannot reach the zygote starts the kernel the old
way (kernel.py), so a dead zygote costs time, never a grade.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import sys

from .lifetime import die_with

NAMESPACES = ("user", "cgroup", "ipc", "uts", "net", "pid", "mnt")
NS_GET_USERNS = 0xB701  # ioctl on a namespace: the user namespace that owns it
MAX_FDS = 8
READY = b"ready\n"


def _prctl(option: int, value: int) -> int:
    import ctypes

    return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def _die_with_parent() -> None:
    """In the kernel, forked inside the sandbox's PID namespace, where its parent's pid is not seen. (Its later
    change of uid clears the signal when the grader is root; the sandbox ends it anyway when its launcher dies.)"""
    _prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG


def _join(pid: int) -> None:
    """Join every namespace of process `pid` that this process is not already in.

    As root, bwrap makes no user namespace: the others are joined as they are. Otherwise bwrap makes two, one
    inside the other: the outer one owns the sandbox's other namespaces (bwrap set them up in it), the inner
    one maps the grader's uid back for the sandboxed command. So the outer one is joined first (the owner of
    the mount namespace: NS_GET_USERNS), then the other namespaces, then the sandbox's own user namespace."""
    import fcntl

    def inode(fd: int) -> int:
        return os.fstat(fd).st_ino

    # read first: once in the sandbox's mount namespace, /proc is the sandbox's, where this process is not
    ours = {name: os.stat(f"/proc/self/ns/{name}").st_ino for name in NAMESPACES
            if os.path.exists(f"/proc/self/ns/{name}")}

    def join(fd: int, name: str) -> None:
        if inode(fd) != ours.get(name):
            os.setns(fd, 0)
            ours[name] = inode(fd)

    fds = {}
    try:
        for name in NAMESPACES:
            try:
                fds[name] = os.open(f"/proc/{pid}/ns/{name}", os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                continue  # a kernel without cgroup namespaces
        owner = fcntl.ioctl(fds["mnt"], NS_GET_USERNS)
        try:
            join(owner, "user")
        finally:
            os.close(owner)
        for name, fd in fds.items():
            if name != "user":
                join(fd, name)
        join(fds["user"], "user")
    finally:
        for fd in fds.values():
            os.close(fd)


def _drop_capabilities() -> None:
    """No capability left in any set (a process that joined bwrap's user namespace holds them all there)."""
    import ctypes

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL
    header, data = Header(0x20080522, 0), (Data * 2)()  # _LINUX_CAPABILITY_VERSION_3
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def _kernel(request: dict, fds: list) -> None:
    """In the sandbox's namespaces: become the kernel. Never returns."""
    from ..executors.zygote import name_process  # dl-kzygote, dl-kjoin (the child that joins a sandbox), dl-kernel
    from ..run.kernel_settings import KernelSettings
    from .kernel import set_limits
    from .sandbox import become_sandbox_uid, fill_working_folder

    os.setsid()
    _die_with_parent()
    name_process(b"dl-kernel")
    stdin, stdout, stderr, *audit_fds = fds
    for fd, std in ((stdin, 0), (stdout, 1), (stderr, 2)):
        os.dup2(fd, std)
    keep = {0, 1, 2, *audit_fds}
    for fd in sorted(int(name) for name in os.listdir("/proc/self/fd")):
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass
    settings, argv = KernelSettings.from_json(request["settings"]), request["argv"]
    os.chdir(request["cwd"])
    fill_working_folder(request["cwd"])
    set_limits(settings)  # as the launcher sets them on itself before bwrap (kernel.py)
    become_sandbox_uid(os.path.dirname(argv[argv.index("-f") + 1]), settings.max_processes)
    _drop_capabilities()
    _prctl(4, 1)  # PR_SET_DUMPABLE: as an exec'd kernel is (a uid change cleared it)
    os.environ.clear()
    os.environ.update(request["env"])
    import numpy

    numpy.random.seed()  # (Python's random module reseeds itself after a fork)
    from . import audit
    from .kernel_app import launch

    if request["audit"]:
        audit.start(*audit_fds)
    sys.argv = ["ipykernel_launcher"]
    launch(argv)
    sys.exit(0)


def _child(conn: socket.socket, request: dict, fds: list, zygote: int) -> None:
    """The zygote's child for one kernel: join the sandbox, fork the kernel there, report how it ended."""
    status = 1
    try:
        from ..executors.zygote import name_process

        die_with(zygote)
        name_process(b"dl-kjoin")
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        _join(int(request["sandbox_pid"]))
        kernel = os.fork()
        if kernel == 0:
            try:
                conn.close()
                _kernel(request, fds)
            except SystemExit as exc:
                os._exit(exc.code if isinstance(exc.code, int) else 1)
            except BaseException:
                import traceback

                traceback.print_exc()
                os._exit(1)
        for fd in fds:
            os.close(fd)
        conn.sendall(json.dumps({"started": kernel}).encode() + b"\n")
        _, how = os.waitpid(kernel, 0)
        status = os.waitstatus_to_exitcode(how)
        try:
            conn.sendall(json.dumps({"exit": status}).encode() + b"\n")
        except OSError:
            pass  # the launcher was killed first (jupyter_client's shutdown): nobody is waiting
    except BaseException:
        import traceback

        traceback.print_exc()
        try:
            conn.sendall(json.dumps({"error": traceback.format_exc(limit=1)[-300:]}).encode() + b"\n")
        except OSError:
            pass
    finally:
        os._exit(0 if status == 0 else 1)


def _receive(conn: socket.socket) -> tuple:
    msg, fds, _, _ = socket.recv_fds(conn, 1 << 16, MAX_FDS)
    return json.loads(msg), list(fds)


def serve(path: str) -> None:
    import threading

    import ipykernel.kernelapp  # noqa: F401  (what every kernel would import first)
    import jax  # noqa: F401
    import jax.numpy  # noqa: F401
    import numpy  # noqa: F401

    from ..executors.zygote import name_process
    from . import audit, kernel, kernel_app, sandbox  # noqa: F401  (what a kernel runs before it starts)
    from .jax_before_fork import prepare_jax_for_forks

    prepare_jax_for_forks()  # what every kernel's first program would do again

    if threading.active_count() != 1 or len(os.listdir("/proc/self/task")) != 1:
        raise SystemExit("the kernel zygote must stay one thread to fork (an import started a thread)")
    name_process(b"dl-kzygote")
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    server.bind(path)
    os.umask(old)
    server.listen(64)
    zygote = os.getpid()
    sys.stdout.buffer.write(READY)
    sys.stdout.flush()
    while True:
        conn, _ = server.accept()
        try:
            request, fds = _receive(conn)
        except (OSError, ValueError):
            conn.close()
            continue
        if os.fork() == 0:
            server.close()
            _child(conn, request, fds, zygote)
        conn.close()
        for fd in fds:
            os.close(fd)


class Zygote:
    """The grading process's handle on its zygote: `spawn` starts it (it imports while the grading process
    does other work), `ready` waits for it and says whether kernels can be forked from it now. One that cannot
    start, or died, is started again once; after that the launchers start kernels the old way."""

    def __init__(self, folder: str, compile_cache: str):
        self.path = os.path.join(folder, "kernel-zygote.sock")
        self.compile_cache = compile_cache
        self.proc = None
        self.starts = 0
        self.waiting = False

    @classmethod
    def adopt(cls, path: str, pid: int, ready_fd: int, compile_cache: str) -> Zygote:
        """A zygote another process started for this one (executors/early_zygotes.py): it listens at `path` and
        says it is ready on `ready_fd`. One that died is replaced as a zygote of this process's own."""
        zygote = cls(os.path.dirname(path), compile_cache)
        zygote.proc, zygote.starts, zygote.waiting = _Adopted(pid, ready_fd), 1, True
        return zygote

    def usable(self) -> bool:
        return len(self.path.encode()) < 100  # a unix socket's path has room for about 104 bytes

    def spawn(self) -> None:
        import subprocess

        from .sandbox import fixed_env, venv_python

        if not self.usable() or self.starts >= 2:
            return
        self.starts += 1
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        try:
            # (no preexec_fn: the grading process runs threads by now, and Python code run between fork and exec
            # could deadlock; the zygote checks its parent itself, first thing)
            self.proc = subprocess.Popen([venv_python(), "-P", "-m", __name__, self.path, str(os.getpid())],
                                         env=fixed_env(home="/", cache=self.compile_cache),
                                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, start_new_session=True,
                                         cwd="/")
            self.waiting = True
        except OSError:
            self.proc = None

    def ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            self.proc = None  # it died: once more
            self.spawn()
        if self.proc is None:
            return False
        if self.waiting:
            self.waiting = False
            if self.proc.stdout.readline() != READY:
                self.proc.kill()
                self.proc.wait()
                self.proc = None
                return False
            self.proc.stdout.close()
        return True

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


class _Adopted:
    """The handle of an adopted zygote: the process that started it reaps it, so this one cannot wait for it,
    and reads whether it is alive from /proc (a zombie is dead)."""

    def __init__(self, pid: int, ready_fd: int):
        self.pid, self.stdout = pid, os.fdopen(os.dup(ready_fd), "rb", buffering=0)  # (the fork's copy of the
        # starter's pipe object owns ready_fd)

    def poll(self) -> int | None:
        try:
            with open(f"/proc/{self.pid}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return -signal.SIGKILL
        return -signal.SIGKILL if state in ("Z", "X") else None

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except OSError:
            pass

    def wait(self) -> None:
        pass  # the starter reaps it


def connect(path: str) -> socket.socket:
    """A connection to the zygote at `path`; raises OSError when it cannot be reached."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError:
        conn.close()
        raise
    return conn


def request_kernel(conn: socket.socket, request: dict, fds: list) -> int:
    """Ask for a kernel in the sandbox request["sandbox_pid"] and wait until it ends: its exit status (1 when
    the zygote could not start it, with the reason on stderr)."""
    socket.send_fds(conn, [json.dumps(request).encode()], fds)
    with conn.makefile("rb") as replies:
        for line in replies:
            reply = json.loads(line)
            if "exit" in reply:
                return int(reply["exit"])
            if "error" in reply:
                sys.stderr.write(f"the kernel zygote could not start the kernel: {reply['error']}\n")
                return 1
    return 1  # the zygote's child died


if __name__ == "__main__":
    die_with(int(sys.argv[2]))  # the grading process that started it: it dies with that one (lifetime.py)
    serve(sys.argv[1])
