"""The grading kernels' JAX compile cache: what the instructor's own code
compiled, read-only for the class.

For every correct answer, the hidden checks compile the same programs
(`update_with_donate` and `train_step`, under the names the exercise asks
for, on the checks' shapes), and compiling them is about a third of a
graded submission's CPU (README, "Where the time went"). So the grader
runs the source of each notebook that has hidden tests (the instructor's
solution and hidden tests, no student's code) once, in a fresh Python with the
grading kernels' fixed environment (as `--no-sandbox` kernels get it; its
cells in IPython's shell, fill_cells.py, which compiles what a kernel does), and
keeps what JAX compiled there as a persistent compilation cache (`fill`;
again whenever those notebooks or JAX change: prepare.py). Each notebook
runs as grading runs it: its main path, the reference part set aside
(reference_part.py), whose programs no grading kernel compiles. A run
fills the notebooks its class handed in (the first grading of an
exercise-only class runs the exercise's source alone) and adds the
others when a later run grades them; the folder's stamp names what it
holds. Grading kernels read it and never write it:

- JAX writes no entry whose compile took less than
  `jax_persistent_cache_min_compile_time_secs`, and for grading kernels that
  is infinite (sandbox.fixed_env);
- the sandbox binds the folder read-only (sandbox.bwrap_argv), and
  `--no-sandbox` kernels, which nothing stops from writing, get a copy that
  lasts one run (steps.Run.executor).

So no submission can leave a program that another student's kernel then
runs. JAX's cache key covers the computation, the compile options, the XLA
flags and jaxlib's version: an answer that compiles something else, or a
later jaxlib, finds no entry and compiles as it would without the cache.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ...course import Course
from ..integrity.sandbox import unsandboxed_env

HIDDEN = "### BEGIN HIDDEN TESTS"
CELL_TIMEOUT = 120  # seconds per code cell of the instructor's own notebook (its whole run: this times its cells)
STAMP = "filled-from"  # in the folder: what it was filled from (JAX reads only its *-cache entries)


def notebooks_with_hidden_tests(course: Course) -> list:
    import nbformat

    return [path for path in course.source_notebooks()
            if any(HIDDEN in cell.source for cell in nbformat.read(path, as_version=4).cells)]


def fill_env(home: str, cache: Path, draw_seed: str = "") -> dict:
    """The environment a fill's notebook runs in: the grading kernels' fixed one, with `cache` as JAX's writable
    compile cache and, with `draw_seed`, the course's secret (the checks compile for the length grading draws:
    hidden/exercise.py)."""
    return unsandboxed_env(home, cache=str(cache), writable=True, draw_seed=draw_seed)


def time_limit(nb) -> int:
    """Seconds a fill's run of `nb` may take: CELL_TIMEOUT for each code cell."""
    return CELL_TIMEOUT * max(1, sum(1 for cell in nb.cells if cell.cell_type == "code"))


def ended(name: str, code: int) -> str:
    return f"{name} ended its run (exit status {code})"


def ran_past(name: str, limit: int) -> str:
    return f"{name} ran past {limit} s"


@dataclass(frozen=True)
class Filled:
    """What a cache folder holds: the digest of what it was filled from, and the notebooks run into it."""

    digest: str = ""
    notebooks: frozenset = frozenset()


def filled_from(folder: Path) -> Filled:
    """What `folder` was filled from (the `digest` given to fill) and with which notebooks; an empty Filled
    if it is no complete cache."""
    try:
        text = (folder / STAMP).read_text()
    except OSError:
        return Filled()
    try:
        stamp = json.loads(text)
        return Filled(stamp["digest"], frozenset(stamp["notebooks"]))
    except (ValueError, KeyError, TypeError):
        return Filled()  # not a stamp this grader wrote: filled again


class EarlyFill:
    """The Python of a fill, started as a run's first act on a course that has no compile cache yet (run/early.py),
    before the run has read its course and imported nbgrader. It imports JAX and IPython (about 0.6 s of a core,
    on the core the run's own imports leave idle), then waits for the notebook to run (fill_cells --wait). A fill
    of one notebook takes it (`Filling`); anything else ends it, and the fill starts its own as before."""

    def __init__(self, folder: Path):
        self.new = folder.with_name(folder.name + ".new")
        self.home = tempfile.mkdtemp(prefix="donation-lab-fill-")
        self.output = tempfile.TemporaryFile(mode="w+")
        # nothing is written in the course before the run has read its input: the course's secret (prepare.py's
        # draw_secret, made at the course's first preparation) comes with the notebook (`take`)
        self.env = fill_env(self.home, self.new)
        self.proc = subprocess.Popen([sys.executable, "-P", "-m", "donation_course.grading.run.fill_cells", "--wait",
                                      str(os.getpid())], stdin=subprocess.PIPE, stdout=self.output,
                                     stderr=subprocess.STDOUT, env=self.env, cwd=self.home, text=True)
        self.taken = False

    def take(self, new: Path, name: str, notebook, draw_seed: str) -> subprocess.Popen | None:
        """Run `notebook` (nbformat's, written as `name`, as run_notebooks writes it) into the cache folder `new`,
        with the course's secret `draw_seed` in its environment, as run_notebooks gives it; None if this Python was
        started for another folder."""
        import nbformat

        if self.taken or new != self.new or self.proc.poll() is not None:
            return None
        self.taken = True
        runs = Path(self.home) / name
        nbformat.write(notebook, runs)
        wanted = fill_env(self.home, self.new, draw_seed)
        env = {k: v for k, v in wanted.items() if self.env.get(k) != v}  # the environment run_notebooks gives
        try:
            self.proc.stdin.write(json.dumps({"notebook": str(runs), "env": env}) + "\n")
            self.proc.stdin.close()
        except OSError:
            return None  # it died meanwhile: its exit status says so (Filling.finish)
        return self.proc

    def close(self) -> None:
        """End it if it still runs (not taken, or the run stopped), and remove its home."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        self.output.close()
        shutil.rmtree(self.home, ignore_errors=True)


class Filling:
    """A fill under way in a process of its own (`start`); `finish` waits for it and returns the line."""

    def __init__(self, course: Course, folder: Path, digest: str, notebooks=None, early: EarlyFill | None = None):
        self.folder, self.digest = folder, digest
        self.limit, self.early_name = None, ""  # a fill run by an EarlyFill: its time limit, its notebook's name
        sources = {p.stem: p for p in notebooks_with_hidden_tests(course)}
        wanted = set(sources)
        if notebooks is not None:
            wanted &= set(notebooks)
        before = filled_from(folder)
        self.kept = before.notebooks if before.digest == digest and folder.is_dir() else frozenset()
        self.todo = sorted(wanted - self.kept)
        self.new = folder.with_name(folder.name + ".new")
        self.proc = None
        if not self.todo:
            return
        shutil.rmtree(self.new, ignore_errors=True)
        if self.kept:  # what it holds stays: the new notebooks' programs are added to a copy
            shutil.copytree(folder, self.new)
        else:
            shutil.rmtree(folder, ignore_errors=True)
            self.new.mkdir(parents=True)
        if early is not None and len(self.todo) == 1:
            from .prepare import draw_secret

            path = sources[self.todo[0]]
            nb = main_path_notebook(path)
            self.proc = early.take(self.new, path.name, nb, draw_secret(course))
            if self.proc is not None:
                self.output, self.early_name, self.limit = early.output, path.name, time_limit(nb)
                return
        self.output = tempfile.TemporaryFile(mode="w+")
        # In a process of its own: the kernel client leaves threads behind, and
        # the grader's process must have one when it forks its workers (pool.py).
        self.proc = subprocess.Popen([sys.executable, "-m", __name__, str(course.root), course.assignment,
                                      str(self.new), *self.todo],
                                     stdout=self.output, stderr=subprocess.STDOUT, text=True)

    def under_way(self) -> bool:
        """Whether a fill was started and is not finished or stopped yet."""
        return self.proc is not None

    def finish(self) -> str:
        """Wait for the fill; '' when there was nothing to fill, else a line for the instructor. If the run
        fails, the folder keeps what it held from the same digest (nothing, if it was filled from another):
        grading goes on without the part that failed."""
        if self.proc is None:
            return ""
        late = False
        try:
            code = self.proc.wait(timeout=self.limit)
        except subprocess.TimeoutExpired:  # (an EarlyFill's: run_notebooks times its own)
            self.proc.kill()
            code, late = self.proc.wait(), True
        except BaseException:  # Ctrl-C
            self.stop()
            raise
        self.proc = None
        self.output.seek(0)
        said = self.output.read()
        self.output.close()
        if code != 0:
            shutil.rmtree(self.new, ignore_errors=True)
            why = (said.strip().splitlines() or ["no output"])[-1]
            if self.early_name:  # as run_notebooks says it
                why = ran_past(self.early_name, self.limit) if late else ended(self.early_name, code)
            if self.kept:
                return (f"note: the compile cache has no programs of {', '.join(self.todo)} (running the source's "
                        f"hidden tests failed: {why}); grading those without them")
            return f"note: no compile cache (running the source's hidden tests failed: {why}); grading without it"
        (self.new / STAMP).write_text(json.dumps({"digest": self.digest,
                                                  "notebooks": sorted(self.kept | set(self.todo))}))
        for path in [self.new, *self.new.rglob("*")]:  # readable by the sandbox's uid, whatever the umask
            path.chmod(path.stat().st_mode | (0o555 if path.is_dir() else 0o444))
        old = self.folder.with_name(self.folder.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        if self.folder.exists():
            self.folder.rename(old)
        self.new.rename(self.folder)
        shutil.rmtree(old, ignore_errors=True)
        entries = sum(1 for p in self.folder.iterdir() if p.name != STAMP)
        return (f"compiled the hidden tests' programs of {', '.join(self.todo)} from the source once: "
                f"{entries} entries in {self.folder}")

    def stop(self) -> None:
        """Stop the fill (the run failed beside it, or Ctrl-C): the folder stays as it was."""
        if self.proc is None:
            return
        self.proc.kill()
        self.proc.wait()
        self.output.close()
        shutil.rmtree(self.new, ignore_errors=True)
        self.proc = None


def start(course: Course, folder: Path, digest: str, notebooks=None, early: EarlyFill | None = None) -> Filling:
    """Start filling `folder` (as `fill` does) in the background; call `finish()` on the result. `early`: a fill's
    Python the run started first, which a fill of one notebook takes."""
    return Filling(course, folder, digest, notebooks, early)


def fill(course: Course, folder: Path, digest: str, notebooks=None) -> str:
    """Run each notebook with hidden tests (of `notebooks` stems, default all), from the course's source,
    with `folder` as JAX's compile cache, recording `digest` as what it was filled from; a notebook already
    run into it from the same digest is not run again. Return a line for the instructor ('' when nothing was
    to run). If that run fails, grading goes on without the part that failed (Filling.finish)."""
    return Filling(course, folder, digest, notebooks).finish()


def main_path_notebook(path: Path):
    """The notebook as grading runs it: its reference part set aside (reference_part.py)."""
    import nbformat

    from ...lesson_size import reference_start  # (not integrity/reference_part.py, which imports nbgrader)

    nb = nbformat.read(path, as_version=4)
    cut = reference_start(nb)
    if cut is not None:
        nb.cells = nb.cells[:cut]
    return nb


def run_notebooks(course: Course, cache: Path, stems: list) -> None:
    """Each notebook of `stems` with hidden tests, its main path, run top to bottom in a fresh Python of its own
    (fill_cells.py: IPython's shell), in the grading kernels' fixed environment with `cache` as JAX's writable
    compile cache; a scratch folder as home and working folder, removed after."""
    import nbformat

    from .prepare import draw_secret

    with tempfile.TemporaryDirectory(prefix="donation-lab-fill-") as home:
        env = fill_env(home, cache, draw_secret(course))
        for path in notebooks_with_hidden_tests(course):
            if path.stem not in stems:
                continue
            nb = main_path_notebook(path)
            runs = Path(home) / f"{path.stem}.ipynb"
            nbformat.write(nb, runs)
            limit = time_limit(nb)
            try:
                subprocess.run([sys.executable, "-P", "-m", "donation_course.grading.run.fill_cells", str(runs)],
                               env=env, cwd=home, check=True, timeout=limit)
            except subprocess.CalledProcessError as exc:
                raise SystemExit(ended(path.name, exc.returncode)) from None
            except subprocess.TimeoutExpired:
                raise SystemExit(ran_past(path.name, limit)) from None


if __name__ == "__main__":
    run_notebooks(Course(Path(sys.argv[1]), sys.argv[2]), Path(sys.argv[3]), sys.argv[4:])
