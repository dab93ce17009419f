"""Read a handed-over program before anything compiles it, as hostile input:
refuse what could reach outside the referee or run without bound in size,
and read the signature of its `main`.

Refused: a program that does not parse; any operation outside StableHLO,
CHLO and func (custom calls, which also carry host callbacks, infeed and
outfeed, send and recv, or any operation marked with a side effect); a
tensor with a dynamic or too large shape; too many operations. Time and
memory at compile and run time are capped by the process (server.py).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .asks import MAX_PROGRAM_CHARS
from .programs import ir, parse

# sdy.mesh: a declaration only; sdy.sharding_constraint: a layout, no computation (lesson 6's quiet_fixed)
ALLOWED_DIALECTS = ("stablehlo.", "chlo.", "func.", "sdy.mesh", "sdy.sharding_constraint")
DENIED_OPS = {"stablehlo.custom_call", "stablehlo.infeed", "stablehlo.outfeed", "stablehlo.send",
              "stablehlo.recv", "stablehlo.create_token", "stablehlo.after_all"}
MAX_ELEMENTS = 1 << 23      # one tensor: 32 MiB of float32
MAX_OPERATIONS = 20000
MAX_PARTITIONS = 8          # lesson 6's mesh
BITS = {"f64": 64, "f32": 32, "bf16": 16, "f16": 16, "i64": 64, "ui64": 64, "i32": 32, "ui32": 32, "i16": 16,
        "ui16": 16, "i8": 8, "ui8": 8, "i1": 8, "complex<f32>": 64, "complex<f64>": 128}
DTYPES = {"f32": "float32", "bf16": "bfloat16", "i32": "int32", "f64": "float64", "f16": "float16",
          "i64": "int64", "i1": "bool", "ui8": "uint8", "i8": "int8", "ui32": "uint32"}
_TENSOR = re.compile(r"^tensor<((?:[0-9?]+x)*)([a-z0-9<>]+)>$")


class Refused(Exception):
    """The program is not judged; the message says why (for the learner and the instructor)."""


@dataclass(frozen=True)
class Tensor:
    shape: tuple
    dtype: str

    def __str__(self):
        return f"{self.dtype}[{','.join(map(str, self.shape))}]"


@dataclass(frozen=True)
class Program:
    text: str
    inputs: tuple        # Tensor per flat argument of main
    aliases: tuple       # per argument: the output index it donates its buffer to (tf.aliasing_output), or None
    donors: tuple        # per argument: marked jax.buffer_donor (donated, to any output)
    outputs: tuple       # Tensor per flat result
    result_names: tuple  # jax.result_info per result ("result[0]['w']"), "" when absent
    operations: tuple = ()  # the name of every operation, in order
    partitions: int = 1  # mhlo.num_partitions: a sharded program runs on that many devices

    @property
    def donated(self) -> tuple:
        return tuple(a is not None or d for a, d in zip(self.aliases, self.donors, strict=True))


def tensor(type_, symbolic: bool = False) -> Tensor:
    """The tensor type's shape and dtype; a dynamic dimension (?) only in a program for every length (symbolic),
    read as 1 (its size is the referee's to choose, and the refined program is screened again)."""
    text = str(type_)
    found = _TENSOR.match(text)
    if not found:
        raise Refused(f"the program has a value of type {text[:80]}, which the grader does not read")
    dims, element = found.groups()
    if "?" in dims and not symbolic:
        raise Refused("the program has a tensor of dynamic shape")
    dims = dims.replace("?", "1")
    if element not in BITS:
        raise Refused(f"the program has a tensor of element type {element}, which the grader does not read")
    shape = tuple(int(d) for d in dims.split("x") if d)
    n = 1
    for d in shape:
        n *= d
    if n > MAX_ELEMENTS:
        raise Refused(f"the program makes a tensor of {n:,} elements ({text[:80]}): over the grader's cap of "
                      f"{MAX_ELEMENTS:,}")
    return Tensor(shape, DTYPES.get(element, element))


def _shape_assertion(op) -> bool:
    """jax.export's check of a program for every length (refinement checks and removes it): allowed there only."""
    return op.name == "stablehlo.custom_call" and "call_target_name" in op.attributes and \
        ir.StringAttr(op.attributes["call_target_name"]).value == "shape_assertion" and not op.results


def _walk(operation, seen: list, symbolic: bool = False):
    for region in operation.regions:
        for block in region.blocks:
            for arg in block.arguments:
                tensor(arg.type, symbolic) if str(arg.type).startswith("tensor") else None
            for op in block.operations:
                op = op.operation
                name = op.name
                seen.append(name)
                if len(seen) > MAX_OPERATIONS:
                    raise Refused(f"the program has more than {MAX_OPERATIONS:,} operations")
                if symbolic and _shape_assertion(op):
                    continue
                if name in DENIED_OPS or name == "builtin.module" or not name.startswith(ALLOWED_DIALECTS):
                    what = "a custom call (a host callback or a kernel outside XLA)" \
                        if name == "stablehlo.custom_call" else f"the operation {name}"
                    raise Refused(f"the program contains {what}, which the grader does not run")
                if "has_side_effect" in op.attributes and str(op.attributes["has_side_effect"]) == "true":
                    raise Refused(f"the program's {name} has a side effect, which the grader does not run")
                for result in op.results:
                    if str(result.type).startswith("tensor"):
                        tensor(result.type, symbolic)
                    elif not str(result.type).startswith("!stablehlo.token"):
                        raise Refused(f"the program has a value of type {str(result.type)[:80]}")
                _walk(op, seen, symbolic)


def _parsed(text) -> tuple:
    """(context, module) of a handed-over program's text, or Refused: not text, over the size cap, not StableHLO."""
    if not isinstance(text, str):
        raise Refused("the hand-over holds no program text")
    if len(text) > MAX_PROGRAM_CHARS:
        raise Refused(f"the program is {len(text):,} characters long: over the grader's cap of "
                      f"{MAX_PROGRAM_CHARS:,}")
    try:
        return parse(text)
    except Exception as exc:
        raise Refused(f"the program does not parse as StableHLO ({str(exc).splitlines()[0][:200]})") from None


def screen_symbolic(text) -> None:
    """Refuse a program for every length (jax.export, asks.SYMBOLIC) before the referee refines it: the same rules,
    dynamic dimensions and jax.export's shape assertions allowed. The refined program is screened again."""
    context, module = _parsed(text)
    with context:
        _walk(module.operation, [], symbolic=True)


def screen(text) -> Program:
    """The program's main signature and donation, or Refused."""
    context, module = _parsed(text)
    seen = []
    with context:
        _walk(module.operation, seen)
        attrs = module.operation.attributes
        partitions = int(ir.IntegerAttr(attrs["mhlo.num_partitions"]).value) \
            if "mhlo.num_partitions" in attrs else 1
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise Refused(f"the program asks for {partitions} partitions; the grader runs at most {MAX_PARTITIONS}")
        mains = [op.operation for op in module.body.operations if op.operation.name == "func.func"
                 and ir.StringAttr(op.operation.attributes["sym_name"]).value == "main"]
        if len(mains) != 1:
            raise Refused("the program has no function main")
        main = mains[0]
        ftype = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
        inputs = tuple(tensor(t) for t in ftype.inputs)
        outputs = tuple(tensor(t) for t in ftype.results)
        arg_attrs = _dicts(main, "arg_attrs", len(inputs))
        res_attrs = _dicts(main, "res_attrs", len(outputs))
        aliases, donors = [], []
        for attrs in arg_attrs:
            alias = attrs.get("tf.aliasing_output")
            aliases.append(int(ir.IntegerAttr(alias).value) if alias is not None else None)
            donors.append(attrs.get("jax.buffer_donor") is not None and str(attrs["jax.buffer_donor"]) == "true")
        names = tuple(ir.StringAttr(a["jax.result_info"]).value if "jax.result_info" in a else ""
                      for a in res_attrs)
    for alias in aliases:
        if alias is not None and not 0 <= alias < len(outputs):
            raise Refused("the program aliases an input to an output it does not have")
    return Program(text, inputs, tuple(aliases), tuple(donors), outputs, names, tuple(seen), partitions)


def _dicts(func, name: str, n: int) -> list:
    if name not in func.attributes:
        return [{} for _ in range(n)]
    array = ir.ArrayAttr(func.attributes[name])
    out = []
    for item in array:
        d = ir.DictAttr(item)
        out.append({d[i].name: d[i].attr for i in range(len(d))})
    return out + [{} for _ in range(n - len(out))]
