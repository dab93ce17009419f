"""The grading kernels' JAX compile cache: what the instructor's own code
compiled, read-only for the class.

For every correct answer, the hidden checks compile the same programs
(`update_with_donate` and `train_step`, under the names the exercise asks
for, on the checks' shapes), and compiling them is about a third of a
graded submission's CPU (README, "Where the time went"). So the grader
runs the source of each notebook that has hidden tests (the instructor's
solution and hidden tests, no student's code) once, in a kernel with the
grading kernels' fixed environment (as `--no-sandbox` kernels get it), and
keeps what JAX compiled there as a persistent compilation cache (`fill`;
again whenever those notebooks or JAX change: prepare.py). Grading
kernels read it and never write it:

- JAX writes no entry whose compile took less than
  `jax_persistent_cache_min_compile_time_secs`, and for grading kernels that
  is infinite (sandbox.fixed_env);
- the sandbox binds the folder read-only (sandbox.bwrap_argv), and
  `--no-sandbox` kernels, which nothing stops from writing, get a copy that
  lasts one run (run.Run.executor).

So no submission can leave a program that another student's kernel then
runs. JAX's cache key covers the computation, the compile options, the XLA
flags and jaxlib's version: an answer that compiles something else, or a
later jaxlib, finds no entry and compiles as it would without the cache.
"""
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ..course import Course
from .sandbox import unsandboxed_env

HIDDEN = "### BEGIN HIDDEN TESTS"
CELL_TIMEOUT = 120  # seconds per cell of the instructor's own notebook
STAMP = "filled-from"  # in the folder: what it was filled from (JAX reads only its *-cache entries)


def notebooks_with_hidden_tests(course: Course) -> list:
    import nbformat

    return [path for path in course.source_notebooks()
            if any(HIDDEN in cell.source for cell in nbformat.read(path, as_version=4).cells)]


def filled_from(folder: Path) -> str:
    """What `folder` was filled from (the `digest` given to fill), or "" if it is no complete cache."""
    try:
        return (folder / STAMP).read_text()
    except OSError:
        return ""


def fill(course: Course, folder: Path, digest: str) -> str:
    """Run each notebook with hidden tests, from the course's source, with
    `folder` as JAX's compile cache (made anew, recording `digest` as what
    it was filled from); return a line for the instructor. If that run
    fails, there is no cache: grading goes on without it.
    In a process of its own: the kernel client leaves threads behind, and
    the grader's process must have one when it forks its workers (pool.py)."""
    new = folder.with_name(folder.name + ".new")
    shutil.rmtree(new, ignore_errors=True)
    shutil.rmtree(folder, ignore_errors=True)
    new.mkdir(parents=True)
    run = subprocess.run([sys.executable, "-m", __name__, str(course.root), course.assignment, str(new)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if run.returncode != 0:
        shutil.rmtree(new, ignore_errors=True)
        why = (run.stdout.strip().splitlines() or ["no output"])[-1]
        return f"note: no compile cache (running the source's hidden tests failed: {why}); grading without it"
    entries = sum(1 for _ in new.iterdir())
    (new / STAMP).write_text(digest)
    for path in [new, *new.rglob("*")]:  # readable by the sandbox's uid, whatever the umask
        path.chmod(path.stat().st_mode | (0o555 if path.is_dir() else 0o444))
    new.rename(folder)
    return f"compiled the hidden tests' programs from the source once: {entries} entries in {folder}"


def run_notebooks(course: Course, cache: Path) -> None:
    import nbformat
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient

    with tempfile.TemporaryDirectory(prefix="donation-lab-fill-") as home:
        specs = Path(home) / "kernels"
        (specs / "fill").mkdir(parents=True)
        # this Python's ipykernel, as the grading kernels start it (not a user's "python3" kernelspec)
        (specs / "fill" / "kernel.json").write_text(json.dumps({
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "fill", "language": "python"}))
        env = unsandboxed_env(home, cache=str(cache), writable=True)
        for path in notebooks_with_hidden_tests(course):
            nb = nbformat.read(path, as_version=4)
            # its connection file in the folder that goes, and shut down after
            # (cleanup_kc): nbclient leaves a kernel manager it did not make running
            km = AsyncKernelManager(kernel_name="fill", connection_file=str(Path(home) / f"{path.stem}.json"),
                                    kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(specs)]))
            NotebookClient(nb, km=km, timeout=CELL_TIMEOUT, allow_errors=True,
                           resources={"metadata": {"path": home}}).execute(env=env, cleanup_kc=True)


if __name__ == "__main__":
    run_notebooks(Course(Path(sys.argv[1]), sys.argv[2]), Path(sys.argv[3]))
