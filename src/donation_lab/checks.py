"""Self-checks for the lesson exercises, written for learners.

A public check either prints one line that says exactly what was checked, or
raises `CheckFailed` (an AssertionError, so nbgrader scores the cell as
failed) with a message that says what was expected, what came back, and a
hint. A passing check says only what it checked ("public check only"); where
hidden tests also run at grading time, the notebook's text says so.
"""
import contextlib
import numbers
import os
import tempfile
import types
import warnings

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


def passed(what: str, note: str = "") -> None:
    print(f"\u2714 {what} ({PUBLIC_ONLY})." + (f" {note}" if note else ""))


def _with_hint(message: str, hint: str = "") -> str:
    return message + (f"\nHint: {hint}" if hint else "")


def _first_line(text) -> str:
    return next((line.strip() for line in str(text).splitlines() if line.strip()), "")


@contextlib.contextmanager
def _captured():
    """Run a block with its warnings recorded (yielded as a list) and what C++
    code writes to the process's stderr (XLA's log lines) dropped: neither may
    land above a check's message, with a site-packages path or a log prefix.
    The checks mention the warnings that matter in their own words."""
    try:
        saved = os.dup(2)
    except OSError:  # no stderr to silence
        saved = None
    with tempfile.TemporaryFile() as sink:
        if saved is not None:
            os.dup2(sink.fileno(), 2)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                yield caught
        finally:
            if saved is not None:
                os.dup2(saved, 2)
                os.close(saved)


def _warned(caught) -> list:
    """The first line of each warning in `caught`, once each, in order (the
    'See an explanation at ...' line and the file that warned are left out)."""
    lines = []
    for w in caught:
        line = _first_line(w.message)
        if line and line not in lines:
            lines.append(line)
    return lines


def _warning_note(lines: list) -> str:
    """One sentence quoting what JAX warned while the check ran, or ''."""
    if not lines:
        return ""
    quoted = "; ".join(f'"{line.rstrip(".")}"' for line in lines)
    why = (" (no output of the same shape and dtype was left to take that buffer, so JAX kept it)"
           if any("donated buffers were not usable" in line for line in lines) else "")
    return f"While the check ran it, JAX warned {quoted}{why}."


def _raised(what: str, exc: BaseException, hint: str = "", warned: list = ()) -> "CheckFailed":
    """The one-paragraph message for a learner's function that raised: the
    exception's type and the first line of its message, never a traceback."""
    first = _first_line(exc)
    text = f"{what}: calling it raised {type(exc).__name__}" + (f": {first}" if first else "")
    text = text.rstrip(".") + "."
    note = _warning_note(list(warned))
    return CheckFailed(_with_hint(text + (f" {note}" if note else ""), hint))


def _run(what: str, fn, *args, hint: str = "", **kwargs):
    """(fn(*args, **kwargs), the first lines of its warnings); an exception becomes a CheckFailed."""
    import jax

    with _captured() as caught:
        try:
            out = fn(*args, **kwargs)
        except CheckFailed:
            raise
        except Exception as exc:  # the learner's code raised: say what, in one paragraph
            raise _raised(what, exc, hint, _warned(caught)) from None
        try:
            jax.block_until_ready(out)
        except Exception:  # a deleted array among the outputs: the check that reads it says so
            pass
    return out, _warned(caught)


def _method_name(value) -> str:
    """The name of a function or method (a nanobind method's __name__ is empty: look it up on its class)."""
    owner, func = getattr(value, "__self__", None), getattr(value, "__func__", None)
    if owner is not None and func is not None:  # the name the class gives it, a public one first
        names = [n for n in dir(type(owner)) if getattr(type(owner), n, None) is func]
        public = [n for n in names if not n.startswith("_")]
        if public or names:
            return (public or names)[0]
    return getattr(value, "__name__", "") or ""


def _is_array(value) -> bool:
    import jax

    return isinstance(value, (np.ndarray, np.generic, jax.Array))


def _not_a_value(what: str, got, expected=None) -> str:
    """A message when `got` is not a value at all, or '': a method or function
    that was not called, or an exception object where its message was meant."""
    if isinstance(got, BaseException) and not isinstance(expected, BaseException):
        return (f"{what}: your answer returned the exception itself ({type(got).__name__}), not its message. "
                "Return the text instead: `return str(exc)`.")
    if callable(got) and not callable(expected) and not isinstance(got, type) and not _is_array(got):
        name = _method_name(got)
        owner = getattr(got, "__self__", None)
        if owner is not None and not isinstance(owner, types.ModuleType):
            return (f"{what}: you passed the method itself, not its result; call it: "
                    f"x.{name or 'method'}() (with the brackets).")
        return (f"{what}: you passed the function {name or ''} itself, not its result; call it: "
                f"{name or 'f'}(...).").replace("function  itself", "function itself")
    return ""


def _kind(value) -> str:
    """What kind of value this is, in a learner's words."""
    if isinstance(value, (bool, np.bool_)):
        return "a bool (True or False)"
    if isinstance(value, numbers.Integral):
        return "an int"
    if isinstance(value, numbers.Real):
        return "a float"
    if value is None:
        return "None"
    if _is_array(value):
        return "an array"
    if isinstance(value, str):
        return "a string"
    return f"a {type(value).__name__}"


def _same_kind(got, expected) -> bool:
    """`got` is a value of `expected`'s type: a NumPy int is an int, a NumPy
    float a float and np.bool_ a bool; a bool is not an int."""
    if isinstance(expected, bool):
        return isinstance(got, (bool, np.bool_))
    if isinstance(expected, int):
        return isinstance(got, numbers.Integral) and not isinstance(got, (bool, np.bool_))
    if isinstance(expected, float):
        return isinstance(got, numbers.Real) and not isinstance(got, numbers.Integral)
    return isinstance(got, type(expected))


def fail(what: str, expected, got, hint: str = "") -> None:
    lines = [_not_a_value(what, got, expected) or f"{what}: expected {show(expected)}, got {show(got)}."]
    if hint:
        lines.append(f"Hint: {hint}")
    raise CheckFailed("\n".join(lines))


def expect_true(what: str, condition: bool, message: str, hint: str = "", passing: str = "") -> None:
    """Pass when `condition` holds; otherwise say `message` (what went wrong).
    A pass prints `passing`, a sentence with its verb ("delta is still alive"),
    or `what` when none is given."""
    if not condition:
        raise CheckFailed(f"{what}: {message}" + (f"\nHint: {hint}" if hint else ""))
    passed(passing or what)


def expect_equal(what: str, got, expected, hint: str = "", reveal: bool = True) -> None:
    """Pass when got == expected, values of the same type (a NumPy int counts
    as an int, a NumPy float as a float, np.bool_ as a bool; a bool is not an
    int). With reveal=False (prediction exercises) a wrong answer is told it is
    wrong and shown the hint, never the expected value; a value of another type
    is told its type and the answer's. A method or function given uncalled, an
    exception object, or None where an answer was expected (a placeholder left
    as it is), is told so."""
    if _same_kind(got, expected) and _equal(got, expected):
        passed(f"{what} is {show(expected)}")
        return
    wrong = _not_a_value(what, got, expected)
    if not wrong and got is None and expected is not None:  # a practice answer cell's placeholder, left as it is
        wrong = f"{what} is still None: replace None with your answer, run that cell, then run this check again."
    if not wrong and not _same_kind(got, expected):
        wrong = f"{what}: {show(got)} is {_kind(got)}, but the answer is {_kind(expected)}."
        if _is_array(got) and getattr(got, "ndim", None) == 0 and isinstance(expected, (bool, int, float)):
            wrong += f" Convert it: {type(expected).__name__}(...)."
        if reveal:
            wrong = f"{what}: expected {show(expected)}, got {show(got)} ({_kind(got)}, not {_kind(expected)})."
    if not wrong:
        if not reveal:
            wrong = (f"{what}: {show(got)} is not right yet (the answer is not shown, so you "
                     "can try again).")
        else:
            wrong = f"{what}: expected {show(expected)}, got {show(got)}."
    raise CheckFailed(_with_hint(wrong, hint))


def _equal(got, expected) -> bool:
    try:
        return bool(got == expected)
    except Exception:  # arrays inside a tuple, say: not a plain value
        return False


def expect_allclose(what: str, got, expected, hint: str = "", rtol: float = 1e-6) -> None:
    """Pass when `got` is an array with the expected shape and values."""
    wrong = _not_a_value(what, got)
    if wrong:
        raise CheckFailed(_with_hint(wrong, hint))
    if got is None:
        fail(what, "an array", None, hint or "did your function `return` its result?")
    try:
        got_np = np.asarray(got)
    except RuntimeError as exc:  # a deleted (donated) JAX array
        raise CheckFailed(f"{what}: the result cannot be read ({_first_line(exc)}). "
                          "Did you return a donated input instead of a new value?") from None
    except Exception as exc:
        raise CheckFailed(_with_hint(f"{what}: the result is not an array of numbers ({type(exc).__name__}: "
                                     f"{_first_line(exc)})", hint)) from None
    if got_np.dtype == object:
        raise CheckFailed(_with_hint(f"{what}: the result is {_kind(got)}, not an array of numbers.", hint))
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
    fresh = [_owned_copy(a) for a in args]
    which = range(len(fresh)) if argnum is None else [argnum]
    before = {i: fresh[i].unsafe_buffer_pointer() for i in which}
    out, warned = _run(what, fn, *fresh, hint=hint)
    where = "of any argument" if argnum is None else f"of argument {argnum}"
    # only a donated (deleted) argument's buffer counts: an argument returned as it is keeps its pointer too
    if not {p for i, p in before.items() if fresh[i].is_deleted()} & _pointers(out):
        note = _warning_note(warned)
        raise CheckFailed(_with_hint(f"{what}: no output is in the buffer {where}, so no buffer was reused "
                                     "(a deleted input is not enough: the memory is only saved when the result "
                                     "takes its place)." + (f" {note}" if note else ""), hint))
    passed(f"{what} puts its result in the buffer {'of an argument' if argnum is None else where}, "
           "so the donation was used")


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
    positional, keyword, _ = _request(_method_name(fn) or "the function", fn, *args, **kwargs)
    return positional, keyword


def _request(what: str, fn, *args, hint: str = "", **kwargs):
    """donation_request, and the first lines of the warnings JAX gave while
    lowering (or calling) `fn`; an exception there becomes a CheckFailed."""
    import jax

    lower = getattr(fn, "lower", None)
    if lower is None:
        return _observed_request(fn, *args, _what=what, _hint=hint, **kwargs)
    with _captured() as caught:
        try:
            positional, keyword = lower(*args, **kwargs).args_info
        except Exception as exc:  # tracing the learner's function raised
            raise _raised(what, exc, hint, _warned(caught)) from None
    requested = lambda info: any(leaf.donated for leaf in jax.tree.leaves(info))  # noqa: E731
    return (tuple(requested(a) for a in positional), {k: requested(v) for k, v in keyword.items()},
            _warned(caught))


def _observed_request(fn, *args, _what: str = "the function", _hint: str = "", **kwargs):
    """donation_request for a function that is not itself a jax.jit function
    (a plain function around one, say): call it on fresh copies of the
    arguments, with JAX's compilation caches cleared so the 'Some donated
    buffers were not usable' warning (given at lowering, once per program)
    shows again, and read what happened. An argument was donated when it is
    deleted AND an output took its buffer (deleting it by hand, `x.delete()`,
    does not count); when JAX warns that a donated buffer was not usable,
    every argument left alive counts as requested (JAX does not say which
    one it was)."""
    import jax

    if not callable(fn):
        raise CheckFailed(f"this should be a function, got {type(fn).__name__}.")
    copy = lambda a: _owned_copy(a) if isinstance(a, jax.Array) else a  # noqa: E731
    pos, kw = [copy(a) for a in args], {k: copy(v) for k, v in kwargs.items()}
    before = {id(a): a.unsafe_buffer_pointer() for a in [*pos, *kw.values()] if isinstance(a, jax.Array)}
    jax.clear_caches()
    out, warned = _run(_what, fn, *pos, hint=_hint, **kw)
    reused = _pointers(out)
    unusable = any("donated buffers were not usable" in line for line in warned)

    def requested(a):
        if not isinstance(a, jax.Array):
            return False
        return (a.is_deleted() and before[id(a)] in reused) or (unusable and not a.is_deleted())

    return tuple(requested(a) for a in pos), {k: requested(v) for k, v in kw.items()}, warned


def _requested(what: str, fn, args, names, hint: str) -> tuple:
    """The names of the positional `args` (named `names`) that `fn` asks to
    donate, and the first lines of what JAX warned meanwhile."""
    if not callable(fn):
        raise CheckFailed(_with_hint(f"{what} should be a function, got {_kind(fn)}.", hint))
    positional, _, warned = _request(what, fn, *args, hint=hint)
    if len(positional) != len(names):
        # jit leaves static arguments out of what it lowers: pairing the
        # rest with `names` would put each flag on the wrong argument.
        expect_true(f"arguments {what} asks to donate", False,
                    f"it takes {len(positional)} array arguments, not {len(names)} ({', '.join(names)}): "
                    "is one of them static (static_argnums)? A static argument is never donated.", hint)
    return [name for name, flag in zip(names, positional, strict=True) if flag], warned


def expect_donation_request(what: str, fn, args, names, donated, hint: str = "") -> None:
    """Pass when `fn`, called with positional `args` (named `names`), asks to
    donate exactly the arguments in `donated`. Unlike is_deleted(), this also
    catches a donation that JAX requested but could not use (the array then
    stays alive, with a warning or, when an output has as many elements but
    another byte size, silently)."""
    requested, warned = _requested(what, fn, args, names, hint)
    note = _warning_note(warned)
    if sorted(requested) != sorted(donated):
        raise CheckFailed(_with_hint(f"arguments {what} asks to donate: expected {show(sorted(donated))}, got "
                                     f"{show(sorted(requested))}." + (f" {note}" if note else ""), hint))
    passed(f"{what} asks to donate exactly {sorted(donated)}", note)


def expect_kept(what: str, fn, args, names, kept, hint: str = "") -> None:
    """Pass when `fn` asks to donate none of `kept`: the arguments its caller
    reads again after the call (a request JAX could not use counts too). The
    check names what must be kept, never what should be donated."""
    requested, warned = _requested(what, fn, args, names, hint)
    wrong = sorted(set(requested) & set(kept))
    note = _warning_note(warned)
    if wrong:
        listed = " and ".join(wrong)
        raise CheckFailed(_with_hint(f"{what} asks to donate {listed}, but the caller reads "
                                     f"{'it' if len(wrong) == 1 else 'them'} again after the call."
                                     + (f" {note}" if note else ""), hint))
    passed(f"{what} donates none of {', '.join(kept)}, which the caller reads again", note)


# ---- answers that raise, tied leaves, returned exceptions (lessons 4 and 5) ----

_JAX_RERUN_LINE = "Calling the de-optimized version."


def call_answer(what: str, fn, *args, hint: str = ""):
    """`fn(*args)`, the learner's function called from a check. When it raises,
    fail with one paragraph that names the error (no traceback through the
    learner's code and JAX). Arithmetic on whole dicts, the NumPy habit
    `params - lr * grads`, gets a message of its own. JAX's warnings and XLA's
    stderr log lines stay inside the check (a warning is quoted in one line),
    and so does JAX's line announcing a debug_nans re-run; any other line the
    call prints is kept."""
    import contextlib
    import io

    if not callable(fn):
        raise CheckFailed(f"{what}: this should be a function, got {type(fn).__name__}.")
    printed, caught = io.StringIO(), []
    try:
        with _captured() as caught, contextlib.redirect_stdout(printed):
            out = fn(*args)
    except CheckFailed:
        raise
    except Exception as exc:
        line = _first_line(exc)
        if not (isinstance(exc, TypeError) and "unsupported operand" in line and "'dict'" in line):
            raise _raised(what, exc, hint, _warned(caught)) from None
        message = (f"{what} raised TypeError ({line}): Python cannot subtract, add or scale whole dicts, "
                   "as NumPy does arrays. Apply the update leaf by leaf, walking params and grads together "
                   "(lesson 4's train_step does).")
        note = _warning_note(_warned(caught))
        raise CheckFailed(_with_hint(message + (f" {note}" if note else ""), hint)) from None
    finally:
        kept = [line for line in printed.getvalue().splitlines() if _JAX_RERUN_LINE not in line]
        if kept:
            print("\n".join(kept))
    note = _warning_note(_warned(caught))
    if note:
        print(note)
    return out


def expect_own_buffers(trees: dict, hint: str = "") -> None:
    """Pass when every leaf of the named trees (`{"params": params, ...}`) is
    a JAX array and no two leaves share one buffer, so one step can donate them
    all. A leaf that is not a JAX array (a Python int, say) gets a message of
    its own: it has no buffer to donate."""
    import jax

    named = [(name + jax.tree_util.keystr(path), leaf) for name, tree in trees.items()
             for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]]
    together = " and ".join(trees)
    for name, leaf in named:
        if not isinstance(leaf, jax.Array):
            raise CheckFailed(_with_hint(f"{name} is {_kind(leaf)}, not a JAX array: it has no buffer, so a "
                                         "step cannot donate it or reuse its memory.", hint))
    owners = {}
    for name, leaf in named:
        first = owners.setdefault(leaf.unsafe_buffer_pointer(), name)
        if first != name:
            raise CheckFailed(_with_hint(f"{first} and {name} share one buffer, so a step donating "
                                         f"{together} would give that buffer away twice.", hint))
    passed(f"every leaf of {together} has a buffer of its own")


def expect_untied(what: str, tree, expected: dict, rerun: str, hint: str = "") -> None:
    """Pass when `tree` (a dict of JAX arrays, keys and values as in `expected`)
    gives each leaf a buffer of its own: a donating update of the whole tree
    runs and deletes every leaf. This donates `tree`, so a second run finds its
    leaves deleted; `rerun` says which cell makes it again."""
    import jax
    import jax.numpy as jnp

    if not isinstance(tree, dict) or sorted(tree) != sorted(expected):
        fail(f"{what}'s keys", sorted(expected), sorted(tree) if isinstance(tree, dict) else type(tree).__name__,
             hint or "keep the tree's keys: only the buffers change.")
    for key in sorted(tree):
        leaf = tree[key]
        if not isinstance(leaf, jax.Array):
            kind = f"{type(leaf).__module__}.{type(leaf).__name__}".removeprefix("builtins.")
            raise CheckFailed(f"{what}[{key!r}] is a {kind}, not a JAX array: only a JAX array's "
                              "buffer can be donated." + (f"\nHint: {hint}" if hint else ""))
    if any(leaf.is_deleted() for leaf in tree.values()):
        raise CheckFailed(f"{what}: its arrays were already donated, by an earlier run of this check or by a "
                          f"donating call of your own. {rerun}")
    keys = sorted(tree)
    shared = [(a, b) for i, a in enumerate(keys) for b in keys[i + 1:]
              if tree[a] is tree[b] or tree[a].unsafe_buffer_pointer() == tree[b].unsafe_buffer_pointer()]
    if shared:
        a, b = shared[0]
        raise CheckFailed(f"{what}: {a!r} and {b!r} are still one array (one buffer), so donating the tree would "
                          "give that buffer away twice." + (f"\nHint: {hint}" if hint else ""))
    passed(f"{what}: every leaf has a buffer of its own")
    for key in keys:
        expect_allclose(f"{what}[{key!r}] (values unchanged)", tree[key], expected[key])
    update = jax.jit(lambda params: jax.tree.map(lambda p: p - jnp.ones_like(p), params), donate_argnums=0)
    call_answer(f"a donating update of {what}", update, tree, hint=hint)
    if not all(leaf.is_deleted() for leaf in tree.values()):
        alive = [key for key in keys if not tree[key].is_deleted()]
        raise CheckFailed(f"{what}: a donating update left {alive} alive, so not every leaf was donated."
                          + (f"\nHint: {hint}" if hint else ""))
    passed(f"a donating update of {what} ran and deleted every leaf ({', '.join(map(repr, keys))})")


def expect_error_message(what: str, got, naming: str, hint: str = "") -> None:
    """Pass when `got` is the text of an error (a str) that names `naming`. An
    exception returned instead of its text gets a message of its own."""
    if isinstance(got, BaseException):
        raise CheckFailed(_with_hint(_not_a_value(what, got), hint))
    if not isinstance(got, str):
        fail(what, f"a message (a str) naming {naming}", got, hint)
    if naming not in got:
        fail(what, f"a message naming {naming}", got, hint)
    passed(f"{what} returns the error's message, which names {naming}")


def expect_training_step(what: str, fn, reference, args, new_buffers: int, hint: str = "") -> None:
    """Pass when the jitted training step `fn` gives `reference`'s values on
    `args`, asks for no donation that JAX cannot use, and writes all but
    `new_buffers` of its output leaves into buffers of donated inputs: what the
    loop replaces reuses its memory. Reads explain_donation's report (nothing
    runs), then calls `fn` once on fresh copies of `args` (the caller's arrays
    are left as they are), with JAX's warnings caught."""
    import warnings

    import jax

    from .explain import explain_donation

    more = f"\nHint: {hint}" if hint else ""
    if not hasattr(fn, "lower"):
        raise CheckFailed(f"{what} should be compiled with jax.jit, so that explain_donation can read it "
                          f"(it is a {type(fn).__name__})." + more)
    try:
        report = explain_donation(fn, *args)
    except Exception as exc:  # the learner's function does not trace on these arguments
        raise CheckFailed(f"{what} cannot be compiled for these arguments: "
                          f"{type(exc).__name__}: {_first_line(exc)}" + more) from None
    if report.unusable:
        paths = [leaf.path for leaf in report.unusable]
        one = len(paths) == 1
        raise CheckFailed(f"{what} asks to donate {' and '.join(paths)}, but no output can take "
                          f"{'its buffer' if one else 'their buffers'}: JAX warns that "
                          f"{'it was' if one else 'they were'} not usable and keeps "
                          f"{'it' if one else 'them'} alive." + more)
    fresh = jax.tree.map(_owned_copy, tuple(args))
    expected = reference(*jax.tree.map(_owned_copy, tuple(args)))
    inputs = [(leaf, leaf.unsafe_buffer_pointer()) for leaf in jax.tree.leaves(fresh)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            out = jax.block_until_ready(fn(*fresh))
        except Exception as exc:
            raise _raised(what, exc, hint) from None
    name = getattr(reference, "__name__", "the reference")
    if jax.tree.structure(out) != jax.tree.structure(expected):
        raise CheckFailed(f"{what} should return what {name} returns, the same tree of arrays." + more)
    for (path, want), got in zip(jax.tree_util.tree_flatten_with_path(expected)[0], jax.tree.leaves(out),
                                 strict=True):
        label = f"{what}(...){jax.tree_util.keystr(path)}"
        try:
            got_np = np.asarray(got)
        except (RuntimeError, ValueError):
            raise CheckFailed(f"{label} cannot be read: its buffer was deleted. Return new values, not a "
                              "donated input." + more) from None
        want_np = np.asarray(want)
        if got_np.shape != want_np.shape or not np.allclose(got_np, want_np, rtol=1e-5, atol=1e-6):
            fail(label, want_np, got_np, hint)
    donated = {pointer for leaf, pointer in inputs if leaf.is_deleted()}
    leaves = jax.tree.leaves(out)
    new = sum(1 for leaf in leaves if leaf.unsafe_buffer_pointer() not in donated)
    if new > new_buffers:
        raise CheckFailed(f"{what} writes {new} of its {len(leaves)} output arrays into new buffers; only "
                          f"{new_buffers} should need {'a new one' if new_buffers == 1 else 'new ones'}. The old "
                          "values the others replace were not donated, so they stayed alive while the step ran."
                          + more)
    passed(f"{what} gives {name}'s values, asks for no donation JAX cannot use, and writes "
           f"{len(leaves) - new} of its {len(leaves)} output arrays into donated buffers")


def call_constrained(what: str, fn, *args, hint: str = ""):
    """`fn(*args)` through `call_answer`, for an answer that constrains a layout
    with `jax.lax.with_sharding_constraint` on an Auto mesh (exercise 6.2).
    JAX's own errors for the two likely wrong shardings point the wrong way (a
    sharding on the Explicit mesh: "You probably meant to use `reshard`"; a
    bare PartitionSpec: "define a context mesh"), so each gets one paragraph
    that names the mistake and the mesh to look on, not the answer's sharding."""
    def guarded(*a):
        try:
            return fn(*a)
        except (ValueError, RuntimeError) as exc:
            text = str(exc)
            if "can only refer to Auto axes" in text:
                raise CheckFailed(_with_hint(
                    f"{what}: with_sharding_constraint was given a sharding on the Explicit mesh, and JAX "
                    "refused it (ValueError). The array lives on the Auto mesh, and a constraint must name a "
                    "sharding on that same mesh. JAX's message suggests `reshard`, but nothing needs moving: "
                    "constrain to a sharding on the input's own mesh.", hint)) from None
            if "requires a non-empty mesh in context" in text:
                raise CheckFailed(_with_hint(
                    f"{what}: with_sharding_constraint was given a bare PartitionSpec, which names no mesh, "
                    "and JAX refused it (RuntimeError). Give it a whole sharding instead, on the input's own "
                    "mesh (the Auto one).", hint)) from None
            raise

    return call_answer(what, guarded if callable(fn) else fn, *args, hint=hint)
