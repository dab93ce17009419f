"""Binder, as repo2docker would build it: a fresh environment from
binder/requirements.txt on binder/runtime.txt's Python, then binder/postBuild,
then the lessons run there through binder/start.

One difference, in speed only: pip installs without byte-compiling every
module (`--no-compile`; about 16 s of CPU here) and the environment leaves
PYTHONDONTWRITEBYTECODE unset, so each module is compiled when first imported
and cached then, as Python does by default. pip ignores compile errors
anyway, so the step can hide nothing the tests would see.

Slow (a fresh venv: about 40 s with warm wheel caches, more without);
`-m "not slow"` leaves it out locally, CI runs it. The build time and peak
memory go to tests/artifacts/binder/build.json.
"""
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from donation_course.course import COURSE
from helpers import ROOT, free_port, grading_code_in_environment, python3_kernel, start_server, wait_for_http

pytestmark = pytest.mark.slow

BINDER = ROOT / "binder"
ARTIFACTS = ROOT / "tests" / "artifacts" / "binder"
EXERCISE = f"{COURSE.exercise}.ipynb"  # the graded exercise, found by its answer cell


def runtime_python():
    """The python that binder/runtime.txt asks for (python-X.Y)."""
    runtime = (BINDER / "runtime.txt").read_text().strip()
    match = re.fullmatch(r"python-(\d+\.\d+)", runtime)
    assert match, f"binder/runtime.txt should read python-X.Y, not {runtime!r}"
    version = match.group(1)
    for candidate in (f"python{version}", "python3", sys.executable):
        exe = shutil.which(candidate) or candidate
        try:
            out = subprocess.run([exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                 capture_output=True, text=True, timeout=60).stdout.strip()
        except OSError:
            continue
        if out == version:
            return exe, version
    pytest.fail(f"no python{version} on PATH for binder/runtime.txt")


def sh(cmd, env, cwd=ROOT, timeout=1200):
    result = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, (
        f"{' '.join(map(str, cmd))} failed ({result.returncode}):\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return result


def children_peak_mib():
    # ru_maxrss of waited-for children: the largest single process, in KiB on Linux.
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


@pytest.fixture(scope="module")
def binder(tmp_path_factory):
    """Build the Binder environment once; return (env, venv, home, build record)."""
    base = tmp_path_factory.mktemp("binder")
    venv, home = base / "venv", base / "home"
    home.mkdir()
    python, version = runtime_python()
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "DONATION_LAB_ROOT",
                        "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_PATH",
                        "JUPYTER_CONFIG_PATH", "JUPYTER_RUNTIME_DIR", "PYTHONDONTWRITEBYTECODE")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    record = {"python": version}

    start = time.monotonic()
    sh([python, "-m", "venv", str(venv)], env)
    sh([str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q", "--no-compile",
        "-r", str(BINDER / "requirements.txt")], env)
    record["requirements_s"] = round(time.monotonic() - start, 1)

    # postBuild as repo2docker runs it: from the repository root, the new
    # environment first on PATH, a home of its own (so no user config is touched).
    build_env = dict(env, HOME=str(home), JUPYTER_CONFIG_DIR=str(home / ".jupyter"),
                     JUPYTER_DATA_DIR=str(home / ".local" / "share" / "jupyter"))
    post = time.monotonic()
    sh(["bash", str(BINDER / "postBuild")], build_env)
    record["postBuild_s"] = round(time.monotonic() - post, 1)
    record["total_s"] = round(time.monotonic() - start, 1)
    record["peak_process_rss_mib"] = round(children_peak_mib())
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "build.json").write_text(json.dumps(record, indent=2) + "\n")
    print(f"binder build: {record}")
    return build_env, venv, base, record


def start_cmd(env, *cmd, cwd=ROOT, timeout=900):
    """Run `cmd` through binder/start (which moves into notebooks/)."""
    return sh(["bash", str(BINDER / "start"), *cmd], dict(env, REPO_DIR=str(ROOT)), cwd=cwd, timeout=timeout)


@pytest.mark.parametrize("notebook", ["solutions/01_why_donate.ipynb", f"solutions/{EXERCISE}"])
def test_notebook_runs_in_the_binder_environment(binder, notebook):
    env, venv, base, _ = binder
    out = base / "executed"
    start_cmd(env, str(venv / "bin" / "python"), "-m", "jupyter", "nbconvert", "--to", "notebook",
              "--execute", "--ExecutePreprocessor.timeout=600", "--output-dir", str(out),
              str(ROOT / notebook))
    import nbformat

    nb = nbformat.read(out / Path(notebook).name, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and "raises-exception" not in cell.metadata.get("tags", []):
            errors = [o for o in cell.outputs if o.output_type == "error"]
            assert not errors, f"{notebook}: {cell.source[:80]!r} raised {errors[0].ename}"


def test_instructor_extensions_are_off_for_learners(binder):
    env, venv, _, _ = binder
    lab = subprocess.run([str(venv / "bin" / "jupyter"), "labextension", "list"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    text = lab.stdout + lab.stderr
    assert "@jupyter/nbgrader" in text, text
    disabled = text.split("Disabled extensions:", 1)[-1] if "Disabled extensions:" in text else ""
    for plugin in ("@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment"):
        assert plugin in disabled, f"{plugin} is not disabled:\n{text}"
    for plugin in ("validate-assignment", "assignment-list"):
        assert f"@jupyter/nbgrader:{plugin}" not in disabled, f"{plugin} should stay on:\n{text}"

    server = subprocess.run([str(venv / "bin" / "jupyter"), "server", "extension", "list"], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=300)
    text = re.sub(r"\x1b\[[0-9;]*m", "", server.stdout + server.stderr)
    # One "NAME enabled|disabled" line per config dir that names it; the
    # highest-priority one (the user's, listed first) decides.
    state = {}
    for ln in text.splitlines():
        parts = ln.split()
        if len(parts) == 2 and parts[1] in ("enabled", "disabled"):
            state.setdefault(parts[0], parts[1])
    assert state.get("nbgrader.server_extensions.formgrader") == "disabled", text
    assert state.get("nbgrader.server_extensions.validate_assignment") == "enabled", text


def test_binder_python3_kernel_is_the_lessons_kernel(binder):
    """postBuild ran binder/lesson-kernel: Binder's Python 3.12.x reports "3.12",
    as the lessons' language_info says (tests/test_environments.py has the
    other side: ipykernel's own kernel reports the patch release)."""
    env, venv, _, _ = binder
    found = python3_kernel(venv / "bin" / "python", env)
    assert "donation_lab.kernel" in found["argv"] and found["version"] == "3.12", found


def test_binder_environment_holds_no_grading_tools(binder):
    env, venv, _, _ = binder
    found = grading_code_in_environment(venv / "bin" / "python", env)
    assert found == {"importable": [], "files": []}, found


def test_nbgrader_validate_passes_the_solution(binder, tmp_path):
    env, venv, _, _ = binder
    solved = tmp_path / EXERCISE
    shutil.copy2(ROOT / "solutions" / solved.name, solved)
    result = sh([str(venv / "bin" / "nbgrader"), "validate", str(solved)], env, cwd=tmp_path, timeout=600)
    assert "Success! Your notebook passes all the tests." in result.stdout, result.stdout + result.stderr


def test_validate_endpoint_in_the_binder_server(binder, tmp_path):
    """The Validate button's server side, in the Binder environment: jupyter
    lab started through binder/start, POST /assignments/validate."""
    env, venv, _, _ = binder
    port, token = free_port(), "binder-" + os.urandom(6).hex()
    cmd = ["bash", str(BINDER / "start"), str(venv / "bin" / "jupyter"), "lab", "--no-browser",
           "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", f"--IdentityProvider.token={token}",
           f"--LabApp.workspaces_dir={tmp_path}"]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    server = start_server(cmd, port=port, token=token, env=dict(env, REPO_DIR=str(ROOT)), cwd=ROOT,
                          log=tmp_path / "lab.log", timeout=180)
    proc = server.proc
    try:
        base = f"http://127.0.0.1:{port}"
        _, body = wait_for_http(f"{base}/api/contents?token={token}", proc=proc)
        names = {item["name"] for item in json.loads(body)["content"]}
        assert EXERCISE in names and "solutions" not in names, names
        request = urllib.request.Request(
            f"{base}/assignments/validate", method="POST",
            data=json.dumps({"path": EXERCISE}).encode(),
            headers={"Authorization": f"token {token}", "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=600) as resp:
            result = json.loads(resp.read())
        # The learner copy as shipped is unanswered: validation runs and reports failure.
        assert result["success"] is True, result  # the request worked
        value = json.loads(result["value"]) if isinstance(result["value"], str) else result["value"]
        assert value.get("failed") and "update_with_donate" in json.dumps(value), value
        # ... and the instructor's formgrader is not served at all.
        try:
            urllib.request.urlopen(f"{base}/formgrader?token={token}", timeout=60)
            status = 200
        except urllib.error.HTTPError as exc:
            status = exc.code
        assert status == 404, f"/formgrader answered {status}"
    finally:
        server.stop()


def test_kernel_and_package_come_from_the_binder_environment(binder):
    """The lessons above really ran on the new environment: its python3 kernel
    and its own (non-editable) install of donation_lab."""
    env, venv, _, _ = binder
    probe = ("import json, sys, donation_lab\n"
             "from jupyter_client.kernelspec import KernelSpecManager\n"
             "spec = KernelSpecManager().get_kernel_spec('python3')\n"
             "print(json.dumps({'argv0': spec.argv[0], 'exe': sys.executable, "
             "'pkg': donation_lab.__file__}))")
    out = json.loads(sh([str(venv / "bin" / "python"), "-c", probe], env, cwd=ROOT / "binder").stdout)
    assert out["argv0"] in ("python", out["exe"]) or out["argv0"].startswith(str(venv)), out
    assert out["pkg"].startswith(str(venv)), out
