"""The README's commands: the lab command serves the course; bad input to
any command gets one clear line, not a traceback."""
import json
import shutil
import socket
from pathlib import Path

import pytest

from donation_course.course import COURSE, NOTEBOOKS
from helpers import COURSE_CMD, run


def one_line_error(result):
    lines = [ln for ln in result.stderr.splitlines() if ln.strip() and "WARNING: Location" not in ln]
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 1, f"expected one line, got:\n{result.stderr}"
    return lines[0]


def test_lab_command_serves_the_lessons(lab_server):
    status, listing = lab_server.api("/api/contents")
    assert status == 200
    names = sorted(item["name"] for item in listing["content"] if item["type"] == "notebook")
    assert names == sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
    _, kernelspecs = lab_server.api("/api/kernelspecs")
    assert "python3" in kernelspecs["kernelspecs"]


def test_lab_command_prints_the_url(lab_server):
    lab_server.api("/api/status")
    log = lab_server.log.read_text()
    assert f"http://127.0.0.1:{lab_server.port}/lab/tree/01_" in log
    assert f"token={lab_server.token}" in log


def test_lab_command_refuses_a_busy_port(env):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        result = run([str(COURSE_CMD), "lab", "--no-browser", "--port", str(port)], env=env, check=False, timeout=120)
    line = one_line_error(result)
    assert f"port {port} is already in use" in line


def test_regenerate_names_a_malformed_source_notebook(env, tmp_path):
    source = tmp_path / "source"
    shutil.copytree(COURSE.source, source)
    victim = sorted(source.glob("*.ipynb"))[0]
    victim.write_text(victim.read_text()[:-40])  # a truncated save
    result = run([str(COURSE_CMD), "regenerate", "--source", str(source), "--notebooks", str(tmp_path / "nb"),
                  "--solutions", str(tmp_path / "sol")], env=env, check=False, timeout=300)
    line = one_line_error(result)
    assert victim.name in line and "not valid notebook JSON" in line


def test_unknown_command_gets_usage(env):
    result = run([str(COURSE_CMD), "frobnicate"], env=env, check=False, timeout=120)
    assert result.returncode == 2
    assert "unknown command 'frobnicate'" in result.stderr
    assert "Traceback" not in result.stderr


def _status(url):
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=60) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def _disabled_extensions(server):
    import re

    _, page = _status(f"{server.base}/lab?token={server.token}")
    config = json.loads(re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>',
                                  page, re.S).group(1))
    return config.get("disabledExtensions", [])


def test_lab_command_opens_the_learners_view(lab_server):
    # Learners keep Validate and the assignment list; the instructor's tools are off.
    assert _status(f"{lab_server.base}/formgrader?token={lab_server.token}")[0] == 404
    disabled = _disabled_extensions(lab_server)
    assert "@jupyter/nbgrader:formgrader" in disabled and "@jupyter/nbgrader:create-assignment" in disabled
    assert "@jupyter/nbgrader:validate-assignment" not in disabled


def test_lab_instructor_option_opens_the_instructors_view(env, tmp_path):
    from helpers import start_lab

    server = start_lab(env, tmp_path, extra=["--instructor"])
    try:
        assert _status(f"{server.base}/formgrader?token={server.token}")[0] == 200
        assert "@jupyter/nbgrader:formgrader" not in _disabled_extensions(server)
        log = server.log.read_text()
        assert "instructor's view" in log and f"/formgrader?token={server.token}" in log
    finally:
        server.stop()


OLDER_PYTHON = Path("/usr/bin/python3.11")  # Debian's: older than the pins' Python


@pytest.mark.skipif(not OLDER_PYTHON.exists(), reason="no Python 3.11 here to start ./course with")
def test_course_started_by_an_older_python_runs_under_python_3_12(env):
    """The README's commands start with the machine's python3; ./course finds
    a Python 3.12 itself and runs under it (here the command is unknown, so it
    answers with its usage: exit 2, which a run that found no 3.12 never gives)."""
    without = {k: v for k, v in env.items() if k != "COURSE_PYTHON"}
    result = run([str(OLDER_PYTHON), str(COURSE_CMD), "frobnicate"], env=without, check=False, timeout=120)
    assert result.returncode == 2 and "unknown command 'frobnicate'" in result.stderr, result.stderr


@pytest.mark.skipif(not OLDER_PYTHON.exists(), reason="no Python 3.11 here to start ./course with")
def test_course_takes_the_python_its_environments_were_made_with_before_searching_path(env, tmp_path):
    """Once an environment exists, ./course runs under the Python it was made with (its pyvenv.cfg), without
    running the python3.12 first on PATH: on a pyenv machine that is a shim which fails after a tenth of a
    second of shell when another version is the global one (every command paid it)."""
    marker = tmp_path / "shim-ran"
    shim = tmp_path / "python3.12"
    shim.write_text(f"#!/bin/sh\ntouch {marker}\nexit 127\n")
    shim.chmod(0o755)
    without = {k: v for k, v in env.items() if k != "COURSE_PYTHON"}
    without["PATH"] = f"{tmp_path}:{without.get('PATH', '')}"
    result = run([str(OLDER_PYTHON), str(COURSE_CMD), "frobnicate"], env=without, check=False, timeout=120)
    assert result.returncode == 2 and "unknown command 'frobnicate'" in result.stderr, result.stderr
    assert not marker.exists()


@pytest.mark.skipif(not OLDER_PYTHON.exists(), reason="no Python 3.11 here to start ./course with")
def test_course_says_in_one_line_that_it_found_no_python_3_12(env, tmp_path):
    """A python3.12 that does not run (a pyenv shim for a version not selected
    exits 127) is passed over; with none left, one line says what to install."""
    shim = tmp_path / "python3.12"
    shim.write_text("#!/bin/sh\necho 'pyenv: python3.12: command not found' >&2\nexit 127\n")
    shim.chmod(0o755)
    result = run([str(OLDER_PYTHON), str(COURSE_CMD), "frobnicate"], env={**env, "COURSE_PYTHON": str(shim)},
                 check=False, timeout=120)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs Python 3.12" in lines[0] and "COURSE_PYTHON" in lines[0], lines


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_ctrl_c_sigterm_and_sighup_stop_a_command_in_one_way(monkeypatch, signame):
    """Ctrl-C, SIGTERM (kill, a batch queue's limit) and SIGHUP (a closed
    terminal, an SSH drop) reach a running command as one exception
    (interrupts.Stopped, a KeyboardInterrupt), raised by one handler, which
    unwinds it (its `finally` blocks run) and exits 128 + the signal; the
    real run stopped by Ctrl-C, with nothing left behind, is
    test_lms.py::test_interrupted_run_rerun_holds_every_student_once_and_leaves_no_temp."""
    import os
    import signal
    import time

    from donation_course import cli, interrupts

    def not_the_commands_handler(signum, frame):
        raise AssertionError(f"{signame} reached the handler this test set, not the command's")

    signum = getattr(signal, signame)
    unwound = []

    def command(argv):
        try:
            assert signal.getsignal(signum) is interrupts._handler
            os.kill(os.getpid(), signum)
            time.sleep(10)  # the handler raises in here; a signal left unhandled returns 0
            return 0
        finally:
            unwound.append(argv)

    monkeypatch.setitem(cli.COMMANDS, "grade", command)
    before = {s: signal.getsignal(s) for s in interrupts.SIGNALS}
    signal.signal(signum, not_the_commands_handler)
    try:
        assert cli.main(["grade", "export.zip"]) == 128 + signum
        assert signal.getsignal(signum) is not_the_commands_handler  # the command's handler is gone again
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
    assert unwound == [["export.zip"]]


class _LosesTheSignal:
    """Ctrl-C while the main thread runs a finalizer (here this `__del__`): the
    KeyboardInterrupt its handler raises there is printed as "Exception ignored"
    and lost, as when the grader drops a dask future or a gradebook session."""

    def __del__(self):
        import os
        import signal

        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(10_000):  # the handler runs between two of these bytecodes
            pass


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the lost KeyboardInterrupt
@pytest.mark.parametrize("then", ["returns", "waits"])
def test_a_ctrl_c_lost_in_a_finalizer_still_stops_the_command(monkeypatch, then):
    """The command goes on after the lost KeyboardInterrupt. One that waits
    for work (the grader's pools call interrupts.check() on each turn) is
    stopped there and unwinds; one that returns exits 130 all the same."""
    import signal
    import time

    from donation_course import cli, interrupts

    went_on, unwound = [], []

    def command(argv):
        try:
            _LosesTheSignal()  # its last reference goes at once: __del__ runs here
            went_on.append(True)
            if then == "waits":
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    interrupts.check()
                    time.sleep(0.01)
            return 0
        finally:
            unwound.append(argv)

    monkeypatch.setitem(cli.COMMANDS, "grade", command)
    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert cli.main(["grade", "export.zip"]) == 130
    finally:
        signal.signal(signal.SIGINT, before)
    assert went_on == [True], "the KeyboardInterrupt was not lost: this test tests nothing"
    assert unwound == [["export.zip"]]
    assert interrupts.received() == 0  # the next command in this process starts afresh


def test_a_signal_ignored_at_start_stays_ignored():
    """`nohup ./course grade ...` (SIGHUP ignored) outlives its terminal."""
    import signal

    from donation_course import interrupts

    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        replaced = interrupts.install()
        try:
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN and signal.SIGHUP not in replaced
            assert signal.getsignal(signal.SIGTERM) is interrupts._handler
        finally:
            interrupts.uninstall(replaced)
    finally:
        signal.signal(signal.SIGHUP, before)


@pytest.mark.parametrize("uv, uv_exit, installer", [
    (["uv", "pip", "install"], 0, "uv"),    # uv installs every step; pip is never run
    (["uv", "pip", "install"], 2, "pip"),   # uv fails (an index only pip.conf names): pip installs every step
    (None, None, "pip"),                    # no uv to be had: pip
])
def test_environments_are_installed_by_uv_and_by_pip_where_uv_cannot(monkeypatch, tmp_path, uv, uv_exit, installer):
    import subprocess

    from helpers import load_course_script

    course = load_course_script()
    ran = []
    monkeypatch.setattr(course, "uv_command", lambda env: uv)
    monkeypatch.setattr(course.subprocess, "run",
                        lambda cmd, **kw: ran.append(("uv", cmd)) or subprocess.CompletedProcess(cmd, uv_exit))
    monkeypatch.setattr(course, "run_or_die", lambda cmd, env: ran.append(("pip", cmd)))
    monkeypatch.setattr(course, "stamp", lambda name: tmp_path / f".installed-{name}")
    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    python.touch()
    (tmp_path / "pyvenv.cfg").write_text(f"version = {course.sys.version.split()[0]}\n")
    course.install("instructor", tmp_path, python, {})

    steps = [["-r", str(course.ROOT / "requirements-instructor.txt")],
             ["--no-deps", "-e", str(course.ROOT), "-e", str(course.ROOT / "autograder" / "tools")]]
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    by_uv = [("uv", [*uv, "--python", str(python), *step]) for step in steps] if uv else []
    by_pip = [("pip", pip + step) for step in steps]
    tail = [("pip", ["bash", str(course.ROOT / "binder" / "drop-slow-imports")])]
    if installer == "uv":
        assert ran == by_uv + tail
    elif uv:  # uv's first step failed: all() stops there, and pip installs both
        assert ran == by_uv[:1] + by_pip + tail
    else:
        assert ran == by_pip + tail
    assert (tmp_path / ".installed-instructor").read_text() == course.requirements_digest("instructor")
