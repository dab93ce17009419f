"""A run's first step on a course: the assignment generated from its source
as it is now, and the compile cache filled from the same source.

Both are redone only when what they were made from changed: the state file
records the source's digest, the cache folder its own (compile_cache.py).
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from importlib.metadata import version
from pathlib import Path

from ..course import Course, run_nbgrader
from .compile_cache import fill, filled_from, notebooks_with_hidden_tests
from .state import State, load_state, save_state


def digest_files(paths: Iterable[Path]) -> str:
    h = hashlib.sha256()
    for path in sorted(paths, key=lambda p: p.name):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def hidden_checks() -> list:
    """The hidden checks' modules the grade cells import (donation_course.hidden)."""
    from .. import hidden

    return sorted(Path(hidden.__file__).parent.glob("*.py"))


def source_digest(course: Course) -> str:
    """What the grades are made from: the source notebooks, the nbgrader
    config and the hidden checks (an edit to any of them regrades everyone,
    --only-changed included)."""
    return digest_files(course.source_notebooks() + [course.root / "nbgrader_config.py"] + hidden_checks())


def cache_digest(course: Course) -> str:
    """What the compile cache is filled from: the notebooks with hidden tests
    and the checks they call, run with this JAX."""
    return (digest_files(notebooks_with_hidden_tests(course) + hidden_checks())
            + f"-jax-{version('jax')}-jaxlib-{version('jaxlib')}")


def ensure_assignment(course: Course, state: State, log: Path) -> None:
    """Generate the assignment (release/ and the gradebook's entries) unless
    the state says it was generated from the source as it is now."""
    source_hash = source_digest(course)
    if state.source == source_hash and course.gradebook.exists() and course.release.is_dir():
        return
    run_nbgrader(course.root, "generate_assignment", course.assignment, "--force", log=log)
    state.source = source_hash
    for student in state.students.values():  # a new assignment version: everyone is graded again, and
        student.hash = ""                     # each review still belongs to the answers it was made on


def prepare(course: Course, out: Path, say: Callable[[str], None], compile_cache: bool = True) -> State:
    """Read the state file (or start afresh), generate the assignment if its
    source changed, save the state; with `compile_cache`, fill the cache
    anew if it is missing or what it was filled from changed. Returns the state."""
    path = course.state_file
    state = load_state(path, say)
    ensure_assignment(course, state, out / "logs" / "generate_assignment.log")
    save_state(path, state)
    if compile_cache:
        cache, digest = course.compile_cache, cache_digest(course)
        if filled_from(cache) != digest:
            say(fill(course, cache, digest))
    return state
