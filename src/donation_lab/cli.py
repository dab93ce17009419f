"""Command line behind ./course: `lab`, `regenerate` and `grade`.

Every failure a user can cause (a busy port, a malformed notebook, a missing
folder) ends with one line on stderr and a non-zero exit, never a traceback.
"""
import argparse
import errno
import os
import secrets
import socket
import sys

from .course import CourseError
from pathlib import Path

from .paths import NOTEBOOKS, SOLUTIONS, SOURCE

DEFAULT_PORT = 8888
ROOT_DIR_OPTIONS = ("--ServerApp.root_dir", "--ServerApp.notebook_dir", "--notebook-dir")


def fail(message: str, code: int = 1) -> int:
    print(f"course: error: {message}", file=sys.stderr, flush=True)
    return code


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def first_lesson() -> str:
    lessons = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
    return lessons[0] if lessons else ""


def lab(argv) -> int:
    parser = argparse.ArgumentParser(
        prog="./course lab",
        description="Open the course in JupyterLab on notebooks/. "
        "Unknown options are passed to `jupyter lab`.",
    )
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"port to serve on (default {DEFAULT_PORT}; 0 picks a free one)")
    parser.add_argument("--ip", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--no-browser", action="store_true", help="do not open a browser (headless use)")
    parser.add_argument("--token", default=None,
                        help="access token (default: a fresh random one, printed in the URL)")
    args, extra = parser.parse_known_args(argv)

    if not NOTEBOOKS.is_dir() or not first_lesson():
        return fail(f"no lesson notebooks in {NOTEBOOKS}; run ./course regenerate first")
    if not 0 <= args.port <= 65535:
        return fail(f"--port must be between 0 and 65535, not {args.port}")
    port = args.port or free_port(args.ip)
    if not port_is_free(port, args.ip):
        return fail(f"port {port} is already in use; pass --port N for another one, or --port 0 for any free port")
    token = args.token if args.token is not None else secrets.token_hex(24)

    url = f"http://{args.ip}:{port}/lab/tree/{first_lesson()}?token={token}"
    # A root dir given by the user (e.g. a scratch copy of the lessons)
    # replaces ours: jupyter refuses two values for it.
    user_root = any(arg.split("=", 1)[0] in ROOT_DIR_OPTIONS for arg in extra)
    print(f"Buffer Donation Lab: JupyterLab on {'the root dir you gave' if user_root else NOTEBOOKS}", flush=True)
    print(f"Open this URL: {url}", flush=True)
    print("Stop with Ctrl-C.", flush=True)
    cmd = [
        sys.executable, "-m", "jupyterlab",
        *([] if user_root else [f"--ServerApp.root_dir={NOTEBOOKS}"]),
        f"--ServerApp.ip={args.ip}",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--LabApp.default_url=/lab/tree/{first_lesson()}",
    ]
    if args.no_browser:
        cmd.append("--no-browser")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # containers and CI machines run as root
    cmd.extend(extra)
    sys.stdout.flush()
    os.execv(sys.executable, cmd)
    return 0  # not reached


def regenerate(argv) -> int:
    parser = argparse.ArgumentParser(
        prog="./course regenerate",
        description="Rebuild notebooks/ (learner copies) and solutions/ from autograder/source/.",
    )
    parser.add_argument("--source", type=Path, default=SOURCE, help="source notebooks (default: the course's)")
    parser.add_argument("--notebooks", type=Path, default=NOTEBOOKS, help="where learner copies go")
    parser.add_argument("--solutions", type=Path, default=SOLUTIONS, help="where solution copies go")
    args = parser.parse_args(argv)
    from .course import regenerate as build

    names = build(notebooks=args.notebooks, solutions=args.solutions, source=args.source)
    print(f"regenerated {len(names)} notebooks into {args.notebooks} and {args.solutions}: {', '.join(names)}")
    return 0


def grade(argv) -> int:
    from .grading.cli import main as grade_main

    return grade_main(argv)


COMMANDS = {"lab": lab, "regenerate": regenerate, "grade": grade}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        return fail(f"usage: donation-lab {{{','.join(COMMANDS)}}} [options]", 2)
    try:
        return COMMANDS[argv[0]](argv[1:])
    except CourseError as exc:
        return fail(str(exc))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
