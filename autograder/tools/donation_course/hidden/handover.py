"""The grading kernel's side of the referee: hand an answer over as data.

When a hidden check of lesson 3 or 7 runs, or a hand-over of
hidden/lessons.py in a graded self-check of lessons 1 to 6, it hands the
function under test over (`hand_over`): a jax.jit function as the StableHLO
programs it lowers to for the referee's signatures (grading/referee/asks.py),
with their donation attributes (a signature of every length, asks.SYMBOLIC,
as the one program jax.export lowers for a symbolic length n, which the
referee runs at lengths it draws itself), the arguments each keeps, and the donation
it requested (`requested`: one flag per flat argument, from the lowering's
args_info; JAX marks a requested argument in the program only where an
output can take its buffer, and drops the rest with a warning); anything
else as its shape only. Lesson 5's answers are values (`hand_over_values`): a JAX
array as its dtype, shape and bytes, a str as its text, never a pickle.
The hand-over is a display output of its own type (asks.MIME) in the
check's grade cell: the worker reads it from the
autograded notebook and removes it before the feedback is written; the
referee, where no learner code runs, compiles and judges those programs
itself (grading/referee/). A function is handed over once; later checks
that get the same function name it by its index.

Nothing here can change a check's result: a failure to hand over is said
in a record of its own (`failed`; the referee then says it received
nothing), and warnings and
output of the lowering are silenced (nbgrader zeroes a grade cell that
writes to stderr). Like safe.py, it is imported at kernel start, before
learner code, and calls only what it captured then.
"""
from base64 import b64encode

import jax
from IPython.display import publish_display_data

from donation_course.grading.referee import asks
from donation_course.grading.referee.programs import exported_text, kept_inputs
from donation_course.hidden.safe import (
    Exception,
    JitFunction,
    StringIO,
    asarray,
    catch_warnings,
    enumerate,
    int,
    is_array,
    len,
    redirect_stderr,
    redirect_stdout,
    simplefilter,
    str,
    type,
)

_Shape = jax.ShapeDtypeStruct
_export, _symbolic_shape = jax.export.export, jax.export.symbolic_shape
_tree_leaves = jax.tree_util.tree_leaves
_b64encode = b64encode
_make_mesh, _NamedSharding, _P, _Auto = jax.make_mesh, jax.sharding.NamedSharding, jax.sharding.PartitionSpec, \
    jax.sharding.AxisType.Auto
_dtypes = {"float32": jax.numpy.float32, "int32": jax.numpy.int32, "bfloat16": jax.numpy.bfloat16}
_publish = publish_display_data


class _Sent(dict):
    """answer name -> [the function objects handed over, in order] (held: an id is never reused). Not a plain
    dict: it fills as checks hand answers over, so the audit's snapshot (audit_policy.contents) watches the
    name it is bound to, not its items."""


_SENT = _Sent()


def _spec(spec, n=None):
    """A ShapeDtypeStruct for an asks spec (a dict of them: a tree); its SYMBOLIC dimensions are `n`."""
    if isinstance(spec, dict):
        return {k: _spec(v, n) for k, v in spec.items()}
    dtype, shape = asks.parse_spec(spec)
    shape = tuple(n if d == asks.SYMBOLIC else d for d in shape)
    if spec.endswith(asks.SPLIT):  # lesson 6's auto_split: made when handed over, in a kernel with 8 devices
        mesh = _make_mesh((8,), ("x",), axis_types=(_Auto,))
        return _Shape(shape, _dtypes[dtype], sharding=_NamedSharding(mesh, _P("x")))
    return _Shape(shape, _dtypes[dtype])


def _symbolic():
    """The symbolic length n >= 1 (one scope for all the arguments of a call): the referee picks the ones it runs."""
    return _symbolic_shape(asks.SYMBOLIC)[0]


def _call_specs(call):
    """(args, kwargs) of ShapeDtypeStructs for an asks.Call."""
    n = _symbolic() if asks.is_symbolic(call) else None
    return tuple(_spec(a, n) for a in call.args), {name: _spec(spec, n) for name, spec in call.kwargs}


def _specs(answer, signature):
    """(args, kwargs) of ShapeDtypeStructs for a signature of the exercise or the capstone."""
    n = _symbolic() if asks.is_symbolic(signature) else None
    if answer is asks.EXERCISE:
        dtype, length = signature
        spec = _Shape((n if n is not None else length,), _dtypes[dtype])
        return (spec, spec), {}
    rows = n if n is not None else signature
    f32 = _dtypes["float32"]
    params = {"w": _Shape((3,), f32), "b": _Shape((), f32)}
    opt = {"m": {"w": _Shape((3,), f32), "b": _Shape((), f32)}, "count": _Shape((), _dtypes["int32"])}
    return (params, opt, _Shape((rows, 3), f32), _Shape((rows,), f32)), {}


def _requested(lowered) -> list:
    """The donation the call asked for, one flag per flat argument in JAX's order (positional arguments, then
    keyword ones by sorted name): every argument donate_argnums or donate_argnames names, used by the program
    or not."""
    return [info.donated is True for info in _tree_leaves(lowered.args_info)]


def _entry(answer, fn) -> dict:
    """What the referee gets for one function: its programs per signature, or its shape."""
    if type(fn) is not JitFunction:
        return {"shape": type(fn).__name__}
    found = {}
    for signature in answer.signatures:
        key = asks.signature_key(answer, signature)
        try:
            with catch_warnings(), redirect_stdout(StringIO()), redirect_stderr(StringIO()):
                simplefilter("ignore")
                args, kwargs = _call_specs(signature) if isinstance(signature, asks.Call) else \
                    _specs(answer, signature)
                lowered = fn.lower(*args, **kwargs)
                if asks.is_symbolic(signature):  # one program for every length, as jax.export lowers it
                    exported = _export(fn)(*args, **kwargs)
                    found[key] = {"text": exported_text(exported),
                                  "kept": [int(i) for i in exported.module_kept_var_idx],
                                  "requested": _requested(lowered)}
                else:
                    found[key] = {"text": lowered.as_text(), "kept": kept_inputs(lowered),
                                  "requested": _requested(lowered)}
        except Exception as exc:
            found[key] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]}
    return {"programs": found}


def _value(value) -> dict:
    """One value as data: a JAX array as its dtype, shape and bytes (base64), a str as its text, None as none;
    anything else as its type's name only."""
    if value is None:
        return {"none": True}
    if type(value) is str:
        return {"text": value[:asks.MAX_VALUE_BYTES]}
    if is_array(value):
        try:
            host = asarray(value)
        except Exception as exc:  # a deleted array
            return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]}
        if host.nbytes > asks.MAX_VALUE_BYTES:
            return {"type": type(value).__name__, "error": "too large"}
        return {"dtype": str(host.dtype), "shape": [int(d) for d in host.shape],
                "data": _b64encode(host.tobytes()).decode("ascii")}
    return {"type": type(value).__name__}


def hand_over_values(answer_name: str, check: str, values: dict) -> None:
    """Hand `values` ({name: value}) over as the answer that `check` judges (each call a new entry)."""
    try:
        sent = _SENT.setdefault(answer_name, [])
        sent.append(None)
        entry = {"values": {str(name): _value(value) for name, value in values.items()}}
        _publish({asks.MIME: {"answer": answer_name, "check": check, "index": len(sent) - 1, "entry": entry}},
                 metadata={})
    except Exception:
        _could_not(answer_name, check)


def hand_over(answer_name: str, check: str, fn) -> None:
    """Hand `fn` over as the answer that `check` judges."""
    try:
        answer = asks.ANSWERS[answer_name]
        sent = _SENT.setdefault(answer_name, [])
        record = {"answer": answer_name, "check": check}
        index = next((i for i, f in enumerate(sent) if f is fn), None)
        if index is None:
            sent.append(fn)
            index = len(sent) - 1
            record["entry"] = _entry(answer, fn)
        record["index"] = index
        _publish({asks.MIME: record}, metadata={})
    except Exception:
        _could_not(answer_name, check)


def _could_not(answer_name: str, check: str) -> None:
    """Say that `check` could not hand its answer over (the referee then says it received nothing, and the kernel's
    own check goes on): a record a learner's function displayed while the check lowered it, before making the
    lowering fail, is then the check's second and flags the student (grading/referee/received.py)."""
    try:
        _publish({asks.MIME: {"answer": answer_name, "check": check, "failed": True}}, metadata={})
    except Exception:
        pass
