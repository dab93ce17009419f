"""`./course site`: build the course's static site, offline, into a folder.

    ./course site                       # into _site/
    ./course site --out DIR --repository OWNER/NAME --branch main

1. Run every solved lesson (`solutions/`) in a fresh kernel, two at a time
   (`--jobs`), on the instructor's environment: the pinned JAX.
2. Make each lesson's page from its learner copy (`notebooks/`) and that run
   (pages.py), cleaned of the build machine (scrub.py).
3. Stage the instructors' pages from docs/, a link to a file the site does
   not publish going to the repository instead.
4. Render with Sphinx, myst-nb and sphinx-book-theme from the site's own
   environment (`.venv/site`, requirements-site.txt; `--sphinx PYTHON`):
   `website/conf.py` and `website/index.md`.
5. Search the result for every solution and hidden-test line and every
   nbgrader delimiter (leaks.py), and for the machine's paths and dates in
   the lesson pages. Any hit stops the build and publishes nothing.

The work folder (`build/site-work/`, git-ignored; `--work`) keeps the
staged sources of the last build and its kernels' logs.
"""
import argparse
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import nbformat

from ..course import COURSE, NOTEBOOKS, ROOT, SOLUTIONS, CourseError
from ..execute import run_notebook
from . import leaks
from .pages import PageError, make_page, run_links
from .scrub import Scrubber

WEBSITE = ROOT / "website"        # conf.py, index.md, _static/
DEFAULT_OUT = ROOT / "_site"
WORK = ROOT / "build" / "site-work"
DOCS = ROOT / "docs"
# The instructors' section: these docs/ pages (sandbox.md: the guide and the threat model link to it).
INSTRUCTOR_DOCS = ["instructor-guide.md", "threat-model.md", "performance.md", "large-class.md", "sandbox.md"]
# Where Binder and the links to unpublished files point; README.md's Binder link names the same one.
REPOSITORY = "buffer-donation-lab/buffer-donation-lab"
BRANCH = "HEAD"
LAB_PORT = 8888  # ./course lab's default port
CELL_TIMEOUT = 300


class SiteError(Exception):
    """The build cannot go on; one line for the user."""


def execute(name: str, run_dir: str) -> tuple[str, float, dict]:
    """Run one solved lesson (in a worker process); its executed notebook, and its time. The kernel's own
    stderr (XLA's log lines for the cells that fail on purpose) goes to a log beside the run, not to the
    terminal: what a cell shows is in its outputs."""
    import os

    with open(Path(run_dir) / f"{name}.kernel.log", "w") as log:
        os.dup2(log.fileno(), 2)
    run = run_notebook(SOLUTIONS / name, timeout=CELL_TIMEOUT, cwd=run_dir)
    return name, run.seconds, run.notebook


def execute_all(names: list[str], jobs: int, run_dir: Path) -> dict:
    """Every lesson's run, the biggest notebooks first (the longest runs, roughly), so that no long run
    starts last while the other worker sits idle."""
    run_dir.mkdir(parents=True, exist_ok=True)
    executed = {}
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        runs = [pool.submit(execute, name, str(run_dir))
                for name in sorted(names, key=lambda n: -(SOLUTIONS / n).stat().st_size)]
        for done in as_completed(runs):
            name, seconds, nb = done.result()
            print(f"  ran {name} in {seconds:.0f} s", flush=True)
            executed[name] = nb
    return executed


def stage_lessons(names, executed, src: Path, scrub, repository: str, branch: str) -> None:
    folder = src / "lessons"
    folder.mkdir(parents=True)
    for name in names:
        learner = nbformat.read(NOTEBOOKS / name, as_version=4)
        try:
            page = make_page(learner, executed[name], run_links(name, repository, branch, LAB_PORT), scrub)
        except PageError as exc:
            raise SiteError(f"{name}: {exc}") from None
        nbformat.write(page, folder / name)


LINK = re.compile(r"(\]\()([^)\s]+)(\))")


def rewrite_links(text: str, published: set[str], repository: str, branch: str) -> str:
    """A relative link to a doc the site publishes, or to an image, stays; one to any other file of the
    repository goes to that file on GitHub."""
    def one(match):
        target = match.group(2)
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            return match.group(0)
        path, _, anchor = target.partition("#")
        resolved = (DOCS / path).resolve()
        if resolved.parent == DOCS.resolve() and resolved.name in published:
            return match.group(0)
        if resolved.is_relative_to(DOCS.resolve() / "images"):
            return match.group(0)
        relative = resolved.relative_to(ROOT.resolve()).as_posix()
        url = f"https://github.com/{repository}/blob/{branch}/{relative}" + (f"#{anchor}" if anchor else "")
        return f"{match.group(1)}{url}{match.group(3)}"
    return LINK.sub(one, text)


def stage_docs(src: Path, repository: str, branch: str) -> None:
    folder = src / "instructors"
    folder.mkdir(parents=True)
    for name in INSTRUCTOR_DOCS:
        text = (DOCS / name).read_text(encoding="utf-8")
        (folder / name).write_text(rewrite_links(text, set(INSTRUCTOR_DOCS), repository, branch), encoding="utf-8")
    shutil.copytree(DOCS / "images", folder / "images")


def render(sphinx_python: str, src: Path, html: Path, doctrees: Path, jobs: int) -> None:
    for name in ("index.md",):
        shutil.copy(WEBSITE / name, src / name)
    command = [sphinx_python, "-m", "sphinx", "-b", "html", "-q", "-W", "--keep-going", "-j", str(jobs),
               "-c", str(WEBSITE), "-d", str(doctrees), str(src), str(html)]
    result = subprocess.run(command, cwd=ROOT)
    if result.returncode != 0:
        raise SiteError(f"Sphinx failed ({result.returncode}); its messages are above")


def check(html: Path, scrub: Scrubber) -> None:
    """Stop before publishing anything that reveals an answer or the build machine."""
    forbidden = leaks.forbidden_texts(COURSE.source_notebooks(), sorted(NOTEBOOKS.glob("*.ipynb")))
    found = leaks.search_site(html, forbidden)
    if found:
        raise SiteError("the built site holds what no page may show:\n" + leaks.describe(found))
    problems = [f"{page.relative_to(html)}: {what}" for page in sorted((html / "lessons").glob("*.html"))
                for what in scrub.leftovers(page.read_text(encoding="utf-8"))]
    if problems:
        raise SiteError("a lesson page still shows the build machine:\n" + "\n".join(problems))


def check_replaceable(out: Path) -> None:
    """`out` is replaced whole: only when it is missing, empty, or a site this command built (its index and
    the .nojekyll it writes), never the checkout or a folder above it."""
    out = out.resolve()
    if out == ROOT.resolve() or ROOT.resolve().is_relative_to(out):
        raise SiteError(f"--out {out} would replace the checkout")
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (
            (out / "index.html").is_file() and (out / ".nojekyll").is_file()))):
        raise SiteError(f"--out {out} is not empty and not a site ./course site built; give another folder")


def build(out: Path, sphinx_python: str, repository: str = REPOSITORY, branch: str = BRANCH, jobs: int = 2,
          work: Path = WORK) -> Path:
    names = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
    missing = [name for name in names if not (SOLUTIONS / name).is_file()]
    if not names or missing:
        raise SiteError(f"no learner notebooks, or no solved copy of {missing}: run ./course regenerate first")
    check_replaceable(out)
    start = time.perf_counter()
    if work.exists():
        shutil.rmtree(work)
    src, html, doctrees = work / "src", work / "html", work / "doctrees"
    scrub = Scrubber(ROOT)
    print(f"course site: running {len(names)} lessons, {jobs} at a time", flush=True)
    executed = execute_all(names, jobs, work / "run")
    stage_lessons(names, executed, src, scrub, repository, branch)
    stage_docs(src, repository, branch)
    print(f"course site: rendering ({time.perf_counter() - start:.0f} s so far)", flush=True)
    render(sphinx_python, src, html, doctrees, jobs)
    check(html, scrub)
    if out.exists():
        shutil.rmtree(out)
    shutil.move(html, out)
    (out / ".buildinfo").unlink(missing_ok=True)
    if (out / "_sources").is_dir() and not any((out / "_sources").iterdir()):
        (out / "_sources").rmdir()  # Sphinx makes it even when it copies no source (html_copy_source)
    (out / ".nojekyll").touch()  # GitHub Pages: serve _static/ and _images/ as they are
    print(f"course site: {out} in {time.perf_counter() - start:.0f} s; open {out / 'index.html'}", flush=True)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="./course site", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the folder to build into (default _site/)")
    parser.add_argument("--repository", default=REPOSITORY,
                        help=f"OWNER/NAME on GitHub, for the Binder links (default {REPOSITORY})")
    parser.add_argument("--branch", default=BRANCH, help=f"the branch Binder opens (default {BRANCH})")
    parser.add_argument("--jobs", type=int, default=2, help="lessons run at once (default 2)")
    parser.add_argument("--work", type=Path, default=WORK,
                        help="the work folder, emptied first (default build/site-work/)")
    parser.add_argument("--sphinx", default=sys.executable,
                        help="the Python that has Sphinx (./course passes .venv/site's)")
    args = parser.parse_args(argv)
    try:
        build(args.out.resolve(), args.sphinx, args.repository, args.branch, max(1, args.jobs), args.work.resolve())
    except (SiteError, CourseError) as exc:
        print(f"course site: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
