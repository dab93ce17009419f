"""A grading kernel keeps what it compiles in its own memory, beside the
course's compile cache that it reads and never writes.

A student's own programs are not in the course's compile cache (JAX's key
covers the program, its names included: run/compile_cache.py), so a grading
kernel compiles them. It may compile one program several times: an answer
that clears its jit cache (`train_step.clear_cache()` around a NaN hunt,
lesson 5's first recipe) makes JAX compile the same program again at its
next call, and compiling `train_step` is about 0.07 s of CPU each time.

So each grading kernel's persistent cache is layered (`install`): JAX reads
an entry from this kernel's memory first, then from the course's folder,
and it puts what it compiles into this kernel's memory only. The memory
ends with the kernel, so no student's program reaches another student's
kernel, and the course's folder stays as the instructor's own notebooks
filled it. A kernel whose learner code changes this layer changes only what
its own kernel runs, which the referee judges again (grading/referee/).

A kernel that may write the course's folder (compile_cache.fill runs the
instructor's source so) keeps JAX's own cache: `install` is for the
kernels that sandbox.fixed_env makes read-only, and does nothing in any other.

JAX has no public way to give it a cache object: this sets
jax._src.compilation_cache's, as jax 0.12.0.1 keeps it
(test_upstream_private_apis.py names what it relies on)."""
from __future__ import annotations

import os

from .sandbox import CACHE_READ_ONLY


def install() -> bool:
    """Layer this kernel's persistent compile cache over the course's (read first, never written). Whether it
    did: not in a kernel that has no course cache or may write one, or whose JAX has already compiled."""
    folder = os.environ.get("JAX_COMPILATION_CACHE_DIR")
    if not folder or os.environ.get("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS") != CACHE_READ_ONLY:
        return False
    import jax
    from jax._src import compilation_cache
    from jax._src.compilation_cache_interface import CacheInterface

    class KernelMemo(CacheInterface):
        """Entries this kernel compiled, in its memory, over the course's folder (read-only)."""

        def __init__(self, course):
            self._course = course
            self._path = course._path
            self._kept: dict = {}

        def get(self, key: str):
            value = self._kept.get(key)
            return value if value is not None else self._course.get(key)

        def put(self, key: str, value: bytes) -> None:
            self._kept[key] = value

    with compilation_cache._cache_initialized_mutex:
        if compilation_cache._cache_initialized:
            return False
        course = compilation_cache.get_file_cache(folder)
        if course is None:
            return False
        compilation_cache._cache = KernelMemo(course[0])
        compilation_cache._cache_initialized = True
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)  # keep all it compiles (in memory)
    return True
