"""The grading kernel's side of the referee: hand an answer over as data.

When a hidden check of lesson 7 runs, it first hands the function under
test over (`hand_over`): a jax.jit function as the StableHLO programs it
lowers to for the referee's signatures (grading/referee/asks.py), with their
donation attributes and the arguments each keeps; anything else as its
shape only. The hand-over is a JSON file per answer in the kernel's runtime
folder's `handover/` (the worker makes that folder; without it, outside
`./course grade`, nothing is written). The referee, where no learner code
runs, compiles and judges those programs itself (grading/referee/).

Nothing here can change a check's result: any failure to hand over is
swallowed (the referee then says it received nothing), warnings and output
of the lowering are silenced (nbgrader zeroes a grade cell that writes to
stderr). Like safe.py, it is imported at kernel start, before learner code.
"""
import json
import os

import jax

from donation_course.grading.referee import asks
from donation_course.grading.referee.programs import kept_inputs
from donation_course.hidden.safe import (
    Exception,
    JitFunction,
    StringIO,
    catch_warnings,
    isinstance,
    len,
    redirect_stderr,
    redirect_stdout,
    simplefilter,
    str,
    type,
)

_Shape = jax.ShapeDtypeStruct
_dtypes = {"float32": jax.numpy.float32, "int32": jax.numpy.int32, "bfloat16": jax.numpy.bfloat16}
_dumps, _replace, _join, _isdir, _dirname = json.dumps, os.replace, os.path.join, os.path.isdir, os.path.dirname
_open, _getpid = open, os.getpid
try:
    from ipykernel.kernelapp import IPKernelApp as _App
except ImportError:  # not in a kernel
    _App = None

_SENT: dict = {}  # answer name -> {"functions": [fn...], "programs": [entry...], "checks": {check: index}}


def _folder():
    """The hand-over folder in this kernel's runtime folder, or None (not graded by ./course grade)."""
    if _App is None or not _App.initialized():
        return None
    folder = _join(_dirname(_App.instance().abs_connection_file), asks.FOLDER)
    return folder if _isdir(folder) else None


def _specs(answer, signature):
    if answer is asks.EXERCISE:
        dtype, n = signature
        spec = _Shape((n,), _dtypes[dtype])
        return (spec, spec)
    f32 = _dtypes["float32"]
    params = {"w": _Shape((3,), f32), "b": _Shape((), f32)}
    opt = {"m": {"w": _Shape((3,), f32), "b": _Shape((), f32)}, "count": _Shape((), _dtypes["int32"])}
    return (params, opt, _Shape((signature, 3), f32), _Shape((signature,), f32))


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
                lowered = fn.lower(*_specs(answer, signature))
                found[key] = {"text": lowered.as_text(), "kept": kept_inputs(lowered)}
        except Exception as exc:
            found[key] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]}
    return {"programs": found}


def hand_over(answer_name: str, check: str, fn) -> None:
    """Hand `fn` over as the answer `check` judges (once per function object; later checks point at it)."""
    try:
        folder = _folder()
        if folder is None:
            return
        answer = asks.ANSWERS[answer_name]
        sent = _SENT.setdefault(answer_name, {"functions": [], "programs": [], "checks": {}})
        index = next((i for i, f in enumerate(sent["functions"]) if f is fn), None)
        if index is None:
            sent["functions"].append(fn)  # held: an id() is never reused while it is
            sent["programs"].append(_entry(answer, fn))
            index = len(sent["programs"]) - 1
        sent["checks"][check] = index
        path = _join(folder, answer.name + ".json")
        temporary = f"{path}.{_getpid()}.tmp"
        with _open(temporary, "w") as out:
            out.write(_dumps({"programs": sent["programs"], "checks": sent["checks"]}))
        _replace(temporary, path)
    except Exception:
        pass  # the referee says it received nothing; the kernel's own check goes on
