"""Self-checks for the lesson exercises, written for learners.

A public check either prints one line that says exactly what was checked, or
raises `CheckFailed` (an AssertionError, so nbgrader scores the cell as
failed) with a message that says what was expected, what came back, and a
hint. A passing check says only what it checked ("public check only"); where
hidden tests also run at grading time, the notebook's text says so.
"""
import numpy as np

PUBLIC_ONLY = "public check only"


class CheckFailed(AssertionError):
    """A self-check failed; the message is meant for the learner.

    IPython shows an exception through its `_render_traceback_` when it has
    one: the notebook shows the message (and hint) alone, never a traceback
    through this module. The grading feedback shows the same message."""

    def _render_traceback_(self) -> list:
        return str(self).splitlines() or [type(self).__name__]


def _float_text(x, dtype) -> str:
    """The shortest decimal that reads back as `x` in `dtype`: a float32 0.525
    is 0.525, not 0.5249999761581421 (its float64 value)."""
    value = float(x)
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    for digits in range(1, 18):
        text = repr(float(f"{value:.{digits}g}"))
        if np.asarray(float(text)).astype(dtype) == np.asarray(x, dtype):
            return text
    return repr(value)


def show(value) -> str:
    """`value` as a check prints it: arrays and NumPy scalars element by
    element at their dtype's precision, anything else as repr()."""
    if isinstance(value, (list, tuple)):
        inner = ", ".join(show(item) for item in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
    if isinstance(value, np.generic):
        value = np.asarray(value)
    if not isinstance(value, np.ndarray):
        return repr(value)
    if value.ndim:
        return "[" + ", ".join(show(item) for item in value) + "]"
    if value.dtype.kind == "f" or "float" in value.dtype.name:  # bfloat16 is a float of kind 'V'
        return _float_text(value[()], value.dtype)
    return repr(value.item())


def passed(what: str) -> None:
    print(f"\u2714 {what} ({PUBLIC_ONLY}).")


def fail(what: str, expected, got, hint: str = "") -> None:
    lines = [f"{what}: expected {show(expected)}, got {show(got)}."]
    if hint:
        lines.append(f"Hint: {hint}")
    raise CheckFailed("\n".join(lines))


def expect_true(what: str, condition: bool, message: str, hint: str = "") -> None:
    """Pass when `condition` holds; otherwise say `message` (what went wrong)."""
    if not condition:
        raise CheckFailed(f"{what}: {message}" + (f"\nHint: {hint}" if hint else ""))
    passed(what)


def expect_equal(what: str, got, expected, hint: str = "", reveal: bool = True) -> None:
    """Pass when got == expected (plain Python values of the same type).
    With reveal=False (prediction exercises) a wrong answer is told it is wrong
    and shown the hint, never the expected value."""
    if not isinstance(got, type(expected)) or got != expected:
        if not reveal:
            raise CheckFailed(f"{what}: {show(got)} is not right yet (the answer is not shown, so you "
                              "can try again)." + (f"\nHint: {hint}" if hint else ""))
        fail(what, expected, got, hint)
    passed(f"{what} is {show(expected)}")


def expect_allclose(what: str, got, expected, hint: str = "", rtol: float = 1e-6) -> None:
    """Pass when `got` is an array with the expected shape and values."""
    if got is None:
        fail(what, "an array", None, hint or "did your function `return` its result?")
    try:
        got_np = np.asarray(got)
    except (RuntimeError, ValueError) as exc:
        raise CheckFailed(f"{what}: the result cannot be read ({exc}). "
                          "Did you return a donated input instead of a new value?") from None
    expected_np = np.asarray(expected, dtype=got_np.dtype if got_np.dtype.kind == "f" else None)
    if got_np.shape != expected_np.shape:
        fail(f"{what} has the wrong shape", expected_np.shape, got_np.shape, hint)
    if not np.allclose(got_np, expected_np, rtol=rtol, atol=0):
        fail(what, expected_np, got_np, hint)
    passed(f"{what} gives {show(expected_np)}")


def expect_deleted(what: str, array, hint: str = "") -> None:
    """Pass when `array` is a deleted JAX array, as a donated one is. This
    cannot tell a donation from `x.delete()` (is_deleted() is True after
    either), so the pass message claims no more than that; `expect_in_place`
    shows that an output took the buffer."""
    deleted = getattr(array, "is_deleted", None)
    if deleted is None:
        fail(f"{what} should be a JAX array", "a jax.Array", type(array).__name__, hint)
    if not deleted():
        raise CheckFailed(f"{what} is still alive, so its buffer was not donated."
                          + (f"\nHint: {hint}" if hint else ""))
    passed(f"{what} is deleted (is_deleted() is True), as a donated array is")


def _pointers(tree) -> set:
    import jax

    return {leaf.unsafe_buffer_pointer() for leaf in jax.tree.leaves(tree)
            if isinstance(leaf, jax.Array) and not leaf.is_deleted()}


def _owned_copy(a):
    """A copy of `a` in a buffer XLA allocated. (Not jax.device_put of a NumPy
    array: that may wrap the NumPy memory, which a donation then deletes but
    no output can take, depending on its alignment.)"""
    import jax.numpy as jnp

    return jnp.copy(jnp.asarray(a))


def expect_in_place(what: str, fn, args, argnum: int | None = 0, hint: str = "") -> None:
    """Pass when `fn(*args)` writes its result into the buffer of argument
    `argnum` (with argnum=None: of any argument): the donation was used, which
    a deleted input alone does not show (`x.delete()` deletes too, and saves
    nothing). Runs on fresh copies of `args`, so the caller's arrays are left
    as they are."""
    import jax

    fresh = [_owned_copy(a) for a in args]
    which = range(len(fresh)) if argnum is None else [argnum]
    before = {i: fresh[i].unsafe_buffer_pointer() for i in which}
    out = jax.block_until_ready(fn(*fresh))
    where = "of any argument" if argnum is None else f"of argument {argnum}"
    # only a donated (deleted) argument's buffer counts: an argument returned as it is keeps its pointer too
    if not {p for i, p in before.items() if fresh[i].is_deleted()} & _pointers(out):
        raise CheckFailed(f"{what}: no output is in the buffer {where}, so no buffer was reused "
                          "(a deleted input is not enough: the memory is only saved when the result takes "
                          "its place)." + (f"\nHint: {hint}" if hint else ""))
    passed(f"{what} puts its result in the buffer {'of an argument' if argnum is None else where} "
           "(the donation was used)")


def require(*names: str) -> None:
    """Fail with a plain 'not answered yet' when an answer cell has not defined
    `names` (instead of a NameError from the first line that uses them)."""
    import inspect

    caller = inspect.currentframe().f_back
    missing = [n for n in names if n not in caller.f_locals and n not in caller.f_globals]
    if missing:
        listed = ", ".join(f"`{n}`" for n in missing)
        raise CheckFailed(f"Not answered yet: {listed} {'is' if len(missing) == 1 else 'are'} not defined. "
                          "Write your answer in this exercise's answer cell, above this check (the code cell "
                          "given with `raise NotImplementedError()`), run that cell, then run this check again.")


def donation_request(fn, *args, **kwargs):
    """Which arguments `fn` (a jax.jit function) asks to donate, read from
    `fn.lower(*args, **kwargs).args_info` without running anything: a tuple
    of bools for the positional arguments and a dict for keyword ones (a
    pytree argument counts as requested when any of its leaves is)."""
    import jax

    lower = getattr(fn, "lower", None)
    if lower is None:
        return _observed_request(fn, *args, **kwargs)
    positional, keyword = lower(*args, **kwargs).args_info
    requested = lambda info: any(leaf.donated for leaf in jax.tree.leaves(info))  # noqa: E731
    return tuple(requested(a) for a in positional), {k: requested(v) for k, v in keyword.items()}


def _observed_request(fn, *args, **kwargs):
    """donation_request for a function that is not itself a jax.jit function
    (a plain function around one, say): call it on fresh copies of the
    arguments, with JAX's compilation caches cleared so the 'Some donated
    buffers were not usable' warning (given at lowering, once per program)
    shows again, and read what happened. An argument was donated when it is
    deleted AND an output took its buffer (deleting it by hand, `x.delete()`,
    does not count); when JAX warns that a donated buffer was not usable,
    every argument left alive counts as requested (JAX does not say which
    one it was)."""
    import warnings

    import jax

    if not callable(fn):
        raise CheckFailed(f"this should be a function, got {type(fn).__name__}.")
    copy = lambda a: _owned_copy(a) if isinstance(a, jax.Array) else a  # noqa: E731
    pos, kw = [copy(a) for a in args], {k: copy(v) for k, v in kwargs.items()}
    before = {id(a): a.unsafe_buffer_pointer() for a in [*pos, *kw.values()] if isinstance(a, jax.Array)}
    jax.clear_caches()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reused = _pointers(jax.block_until_ready(fn(*pos, **kw)))
    unusable = any("donated buffers were not usable" in str(w.message) for w in caught)

    def requested(a):
        if not isinstance(a, jax.Array):
            return False
        return (a.is_deleted() and before[id(a)] in reused) or (unusable and not a.is_deleted())

    return tuple(requested(a) for a in pos), {k: requested(v) for k, v in kw.items()}


def _requested(what: str, fn, args, names, hint: str) -> list:
    """The names of the positional `args` (named `names`) that `fn` asks to donate."""
    positional, _ = donation_request(fn, *args)
    if len(positional) != len(names):
        # jit leaves static arguments out of what it lowers: pairing the
        # rest with `names` would put each flag on the wrong argument.
        expect_true(f"arguments {what} asks to donate", False,
                    f"it takes {len(positional)} array arguments, not {len(names)} ({', '.join(names)}): "
                    "is one of them static (static_argnums)? A static argument is never donated.", hint)
    return [name for name, flag in zip(names, positional, strict=True) if flag]


def expect_donation_request(what: str, fn, args, names, donated, hint: str = "") -> None:
    """Pass when `fn`, called with positional `args` (named `names`), asks to
    donate exactly the arguments in `donated`. Unlike is_deleted(), this also
    catches a donation that JAX requested but could not use (the array then
    stays alive, with a warning or, when an output has as many elements but
    another byte size, silently)."""
    requested = _requested(what, fn, args, names, hint)
    if sorted(requested) != sorted(donated):
        fail(f"arguments {what} asks to donate", sorted(donated), sorted(requested), hint)
    passed(f"{what} asks to donate exactly {sorted(donated)}")


def expect_kept(what: str, fn, args, names, kept, hint: str = "") -> None:
    """Pass when `fn` asks to donate none of `kept`: the arguments its caller
    reads again after the call (a request JAX could not use counts too). The
    check names what must be kept, never what should be donated."""
    wrong = sorted(set(_requested(what, fn, args, names, hint)) & set(kept))
    if wrong:
        listed = " and ".join(wrong)
        raise CheckFailed(f"{what} asks to donate {listed}, but the caller reads "
                          f"{'it' if len(wrong) == 1 else 'them'} again after the call."
                          + (f"\nHint: {hint}" if hint else ""))
    passed(f"{what} donates none of {', '.join(kept)}, which the caller reads again")
