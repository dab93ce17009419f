"""The grading kernel's sandbox (bubblewrap), and its fixed environment.

Each grading kernel runs as (kernel.py, outside) -> bwrap -> (kernel.py
--inner, inside, still root; it waits) -> setuid to an unprivileged uid -> ipykernel:

- namespaces: no network (--unshare-net), its own PID, IPC and UTS
  namespaces (--unshare-pid/-ipc/-uts), a new session (no TIOCSTI), dies with
  the grader (--die-with-parent);
- file system: a fresh tmpfs root holding read-only binds of the system
  (/usr, /etc's few files a Python needs), of the interpreter the venv was
  made from, of the venv and of the two local packages' source
  (src/donation_lab, autograder/tools): nothing else. Not the course folder
  (gradebook.db, source/, release/, submitted/, autograded/, other
  students), not the instructor's home. The kernel's working folder (the
  student's autograded/<student>/<assignment>/, where nbgrader runs the
  notebook) is a writable COPY on a size-capped tmpfs at the same path
  (the original is bound read-only at SUBMISSION and copied in before the
  kernel starts): writes stay in the sandbox and end with it. /tmp is a
  private tmpfs with the same cap; /proc shows only the sandbox's processes;
- the kernel and the grader talk over IPC (unix) sockets in its runtime
  folder (KernelManager.transport = "ipc"), which inside is a tmpfs of
  RUNTIME_BYTES holding a read-only bind of the connection file: the kernel
  makes its sockets there and can write nothing else outside its caps. The
  grader reaches them through the sandbox's root (/proc/PID/root: links the
  launcher makes in the real folder, link_sockets);
- caps (settings.GradingSettings holds every figure): address space
  (RLIMIT_AS), processes (RLIMIT_NPROC: enforced because the kernel runs as
  an unprivileged uid, not root), file size (RLIMIT_FSIZE), disk (the two
  tmpfs sizes, which also bound the memory they take), no core files; time
  per cell and per submission (worker/pool); output size (fastkernel.py).
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

SANDBOX_UID = 65534  # "nobody": no file outside the sandbox's binds belongs to it
INSTALL_HINT = ("bubblewrap (bwrap) is needed to grade in a sandbox: install it with "
                "`apt-get install bubblewrap` (or run ./course grade --no-sandbox to grade without one)")

# /etc files a Python process and JAX read; the rest of /etc stays out
ETC = ["ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "nsswitch.conf", "passwd", "group",
       "ssl", "alternatives", "mime.types"]


def venv_python() -> str:
    """This environment's Python, by its resolved path: the sandbox binds
    resolved paths, and a venv reached through a symlink (a symlinked
    checkout or .venv) must be exec'd at the path it is bound at."""
    return str(Path(sys.prefix).resolve() / "bin" / Path(sys.executable).name)


def _roots() -> list:
    """Read-only binds: the interpreter, the venv, the local packages' source."""
    import donation_course
    import donation_lab

    paths = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(),
             Path(donation_lab.__file__).resolve().parent,  # src/donation_lab
             Path(donation_course.__file__).resolve().parents[1]}  # autograder/tools
    return sorted(str(p) for p in paths)


# JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS of a kernel that reads the course's compile cache and may not write it
# (JAX writes no entry compiled faster than this); kernel_compile_memo.py keeps such a kernel's compiles in memory
CACHE_READ_ONLY = "inf"


def fixed_env(home: str, cache: str = "", writable: bool = False, draw_seed: str = "") -> dict:
    """The grading kernel's environment, built from scratch: the same in any
    instructor shell (no JAX_*/XLA_FLAGS, PYTHONWARNINGS or locale of theirs).
    With `cache`, JAX reads compiled programs from that folder; it writes
    them there only if `writable` (compile_cache.py: only the instructor's
    own notebooks run so). `draw_seed`: the course's secret for what the hidden checks draw (prepare.draw_secret)."""
    venv_bin = str(Path(venv_python()).parent)
    env = {
        "PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin",
        "HOME": home, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TZ": "UTC",
        "PYTHONWARNINGS": "ignore",  # a warning on stderr would zero a grade cell
        "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1",
        "PYTHONUNBUFFERED": "1", "VIRTUAL_ENV": str(Path(sys.prefix).resolve()),
        "IPYTHONDIR": "/tmp/ipython", "MPLCONFIGDIR": "/tmp/matplotlib", "JUPYTER_DATA_DIR": "/tmp/jupyter",
        # no JAX_*/XLA_FLAGS but these: a lesson sets its own XLA_FLAGS
        "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "3",
        "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
        # no process starts in a grading kernel: lesson 1's memory measurement runs in the kernel itself
        "DONATION_LAB_NO_PROCESSES": "1",
    }
    if draw_seed:
        env["DONATION_LAB_DRAW_SEED"] = draw_seed  # hidden/exercise.py's DRAW_SEED_ENV
    if cache:
        env.update(JAX_COMPILATION_CACHE_DIR=cache,
                   # JAX writes an entry only if compiling took at least this long
                   JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0" if writable else CACHE_READ_ONLY,
                   JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0",
                   # no XLA caches beside it (GPU autotuning, by default): their
                   # path would enter every key, and a copied course would match none
                   JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES="none")
    return env


def unsandboxed_env(scratch: str, cache: str = "", writable: bool = False, draw_seed: str = "") -> dict:
    """fixed_env for a kernel outside the sandbox: its home, IPython's,
    matplotlib's, Jupyter's and temporary files all in `scratch`."""
    env = fixed_env(home=scratch, cache=cache, writable=writable, draw_seed=draw_seed)
    env.update(IPYTHONDIR=os.path.join(scratch, "ipython"), MPLCONFIGDIR=os.path.join(scratch, "mpl"),
               JUPYTER_DATA_DIR=os.path.join(scratch, "jupyter"), TMPDIR=scratch)
    return env


SUBMISSION = "/.submission"  # inside: the working folder as nbgrader made it, read-only
RUNTIME_BYTES = 1 << 20       # the runtime folder's tmpfs: a connection file and five sockets


MPL_DIR = "/tmp/matplotlib"  # the kernel's MPLCONFIGDIR (fixed_env)


def font_list(folder: Path) -> str:
    """matplotlib's font list (fontlist-v*.json), built once in `folder` by a Python in the kernel's environment
    (outside the sandbox, before any kernel), '' if matplotlib is not installed. A kernel starts with it in its
    MPLCONFIGDIR, so matplotlib never runs fc-list there: no process starts in a grading kernel once it is up."""
    found = sorted(folder.glob("fontlist-*.json"))
    if found:
        return str(found[-1])
    import tempfile

    folder.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix="fonts-", dir=folder))
    env = dict(fixed_env(home=str(build)), MPLCONFIGDIR=str(build))
    try:
        subprocess.run([venv_python(), "-c", "import matplotlib.font_manager"], env=env, cwd=build,
                       capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    for made in build.glob("fontlist-*.json"):
        os.replace(made, folder / made.name)  # atomic: a launcher beside this one sees all of it or nothing
    shutil.rmtree(build, ignore_errors=True)
    found = sorted(folder.glob("fontlist-*.json"))
    return str(found[-1]) if found else ""


def course_font_list(grading_dir: Path) -> str:
    """font_list, kept in the course's grading folder for the matplotlib version installed: built by the course's
    first grading run, then found by every later one and by each of its kernel launchers (which otherwise build
    one per grading process). A matplotlib upgrade gets a folder of its own. '' without matplotlib."""
    from importlib import metadata

    try:
        version = metadata.version("matplotlib")
    except metadata.PackageNotFoundError:
        return ""
    return font_list(grading_dir / f"fonts-matplotlib-{version}")


def bwrap_argv(cwd: str, runtime: str, disk_bytes: int, extra_ro=(), fonts: str = "") -> list:
    """bwrap's command line for a kernel whose working folder is `cwd`, seen
    inside at the same path as a tmpfs of `disk_bytes` (the launcher's inner
    step copies the folder's files in from SUBMISSION), with /tmp another
    tmpfs of that size, and whose connection file and sockets are in `runtime`;
    `fonts`: matplotlib's font list (font_list), bound read-only into its MPLCONFIGDIR."""
    argv = ["bwrap", "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", "--hostname", "grader",
            "--tmpfs", "/", "--proc", "/proc", "--dev", "/dev",
            "--perms", "1777", "--size", str(disk_bytes), "--tmpfs", "/tmp",
            "--ro-bind", "/usr", "/usr"]
    for link in ("bin", "lib", "lib64", "sbin"):
        target = os.readlink(f"/{link}") if os.path.islink(f"/{link}") else None
        if target:
            argv += ["--symlink", target, f"/{link}"]
        elif os.path.isdir(f"/{link}"):
            argv += ["--ro-bind", f"/{link}", f"/{link}"]
    argv += ["--perms", "0755", "--dir", "/etc"]
    for name in ETC:
        argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    binds = [*_roots(), *extra_ro]
    made = {"/", "/usr", "/tmp", "/etc", "/proc", "/dev"}
    for path in [*binds, cwd, runtime]:  # parents bwrap would make 0700: the kernel's uid must pass them
        for parent in reversed(Path(path).parents):
            if str(parent) not in made:
                made.add(str(parent))
                argv += ["--perms", "0755", "--dir", str(parent)]
    for path in binds:
        argv += ["--ro-bind", path, path]
    argv += ["--ro-bind", cwd, SUBMISSION, "--size", str(disk_bytes), "--tmpfs", cwd,
             "--perms", "0755", "--size", str(RUNTIME_BYTES), "--tmpfs", runtime,
             "--ro-bind", f"{runtime}/connection.json", f"{runtime}/connection.json", "--chdir", cwd, "--clearenv"]
    if fonts:
        argv += ["--perms", "1777", "--dir", MPL_DIR, "--ro-bind", fonts, f"{MPL_DIR}/{Path(fonts).name}"]
    # the root tmpfs read-only once everything is mounted on it: its folders (bwrap made them) belong to the
    # kernel's uid when the grader is not root, and it has no size cap (the capped tmpfs are mounts of their own)
    return argv + ["--remount-ro", "/"]


def link_sockets(connection: dict, sandbox_pid: int) -> None:
    """Make the kernel's ipc sockets, which live in the sandbox's runtime tmpfs, reachable at their usual paths
    outside: a link at each, into the sandbox's root as the grader sees it (/proc/PID/root of a process inside)."""
    if connection.get("transport") != "ipc":
        return  # (a sandboxed kernel has no network: the grader always gives it ipc)
    ports = [connection[k] for k in ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")]
    for port in ports:
        path = f"{connection['ip']}-{port}"
        try:
            os.symlink(f"/proc/{sandbox_pid}/root{path}", path)
        except FileExistsError:
            pass


def probe() -> str:
    """'' when bwrap can create the sandbox here, else one line saying how to get it."""
    if shutil.which("bwrap") is None:
        return INSTALL_HINT
    try:
        r = subprocess.run(["bwrap", "--unshare-net", "--unshare-pid", "--die-with-parent", "--ro-bind", "/", "/",
                            "--proc", "/proc", "--dev", "/dev", "true"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{INSTALL_HINT}; bwrap could not start here: {exc}"
    if r.returncode != 0:
        why = (r.stderr.strip().splitlines() or ["unknown error"])[-1]
        return (f"{INSTALL_HINT}; bwrap cannot create namespaces here ({why}): allow user namespaces "
                "(sysctl kernel.unprivileged_userns_clone=1) or run the grader as root")
    return ""


def fill_working_folder(cwd: str) -> None:
    """Inside the sandbox, before the kernel starts: copy the submission's
    working folder (read-only at SUBMISSION) into the capped tmpfs at `cwd`,
    owned by the sandbox uid when the launcher runs as root."""
    shutil.copytree(SUBMISSION, cwd, dirs_exist_ok=True, symlinks=True)
    if os.getuid() != 0:  # not root: the kernel keeps the grader's uid (no RLIMIT_NPROC then)
        return
    for root, dirs, files in os.walk(cwd):
        for name in [*dirs, *files]:
            os.lchown(os.path.join(root, name), SANDBOX_UID, SANDBOX_UID)
    os.chown(cwd, SANDBOX_UID, SANDBOX_UID)
    os.chmod(cwd, 0o700)


def become_sandbox_uid(runtime: str, nproc: int) -> None:
    """Inside the sandbox, the kernel's last step as root: the runtime tmpfs (where the kernel makes its sockets)
    handed to the sandbox uid, the process cap set (RLIMIT_NPROC counts per real uid), root dropped for the
    sandbox uid. Nothing when not root: the kernel then keeps the grader's uid (no process cap)."""
    import resource

    if os.getuid() != 0:
        return
    os.chown(runtime, SANDBOX_UID, SANDBOX_UID)
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    os.setgroups([])
    os.setresgid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID)
    os.setresuid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID)
