"""Self-checks for the lesson exercises, written for learners.

A public check either prints one line that says exactly what was checked, or
raises `CheckFailed` (an AssertionError, so nbgrader scores the cell as
failed) with a message that says what was expected, what came back, and a
hint. Passing the public checks never claims more than it checked: hidden
tests run only at grading time, and the message says so.
"""
import numpy as np

PUBLIC_ONLY = "public check only: more cases are checked when your work is graded"


class CheckFailed(AssertionError):
    """A self-check failed; the message is meant for the learner."""


def passed(what: str) -> None:
    print(f"\u2714 {what} ({PUBLIC_ONLY}).")


def fail(what: str, expected, got, hint: str = "") -> None:
    lines = [f"{what}: expected {expected!r}, got {got!r}."]
    if hint:
        lines.append(f"Hint: {hint}")
    raise CheckFailed("\n".join(lines))


def expect_true(what: str, condition: bool, message: str, hint: str = "") -> None:
    """Pass when `condition` holds; otherwise say `message` (what went wrong)."""
    if not condition:
        raise CheckFailed(f"{what}: {message}" + (f"\nHint: {hint}" if hint else ""))
    passed(what)


def expect_equal(what: str, got, expected, hint: str = "") -> None:
    """Pass when got == expected (plain Python values of the same type)."""
    if not isinstance(got, type(expected)) or got != expected:
        fail(what, expected, got, hint)
    passed(f"{what} is {expected!r}")


def expect_allclose(what: str, got, expected, hint: str = "", rtol: float = 1e-6) -> None:
    """Pass when `got` is an array with the expected shape and values."""
    if got is None:
        fail(what, "an array", None, hint or "did your function `return` its result?")
    try:
        got_np = np.asarray(got)
    except RuntimeError as exc:
        raise CheckFailed(f"{what}: the result cannot be read ({exc}). "
                          "Did you return a donated input instead of a new value?") from None
    expected_np = np.asarray(expected, dtype=got_np.dtype if got_np.dtype.kind == "f" else None)
    if got_np.shape != expected_np.shape:
        fail(f"{what} has the wrong shape", expected_np.shape, got_np.shape, hint)
    if not np.allclose(got_np, expected_np, rtol=rtol, atol=0):
        fail(what, expected_np.tolist(), got_np.tolist(), hint)
    passed(f"{what} gives {expected_np.tolist()}")


def expect_deleted(what: str, array, hint: str = "") -> None:
    """Pass when `array` is a JAX array whose buffer was donated (deleted)."""
    deleted = getattr(array, "is_deleted", None)
    if deleted is None:
        fail(f"{what} should be a JAX array", "a jax.Array", type(array).__name__, hint)
    if not deleted():
        raise CheckFailed(f"{what} is still alive, so its buffer was not donated."
                          + (f"\nHint: {hint}" if hint else ""))
    passed(f"{what} was donated (is_deleted() is True)")
