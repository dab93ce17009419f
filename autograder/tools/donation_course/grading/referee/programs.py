"""The referee's only use of JAX's private APIs: parse a StableHLO program,
compile it for the CPU backend and run it on arrays, as jax.jit does inside.

A program jax.export lowered for every length (shape polymorphism) is made
static for a length the referee draws (`refine`), as jax does inside when
it calls an exported function, and then compiled as any other.

JAX has no public way to compile a program handed over as text (jax.export
runs a program only inside a jit of its own, which decides donation itself,
so it could not show what the learner's program donates). Each function
here is guarded by tests/test_upstream_private_apis.py: after a JAX upgrade,
that test names what to re-check; the sharded ones (lesson 6: compile_sharded,
shardings, put_sharded, run_sharded, set_cpu_devices) by test_referee.py's
lesson 6 test, which runs them in-process on 8 devices and in the server's child.
"""
from __future__ import annotations

from jax._src import compiler, xla_bridge  # private: guarded by the canary
from jax._src.interpreters import mlir  # private: guarded by the canary
from jax._src.lib import xla_client  # private: guarded by the canary
from jax._src.lib.mlir import ir  # private: guarded by the canary

__all__ = ["ir", "parse", "exported_text", "refine", "compile_program", "run", "alias_bytes", "memory_bytes",
           "kept_inputs", "set_cpu_devices", "compile_sharded", "shardings", "put_sharded", "run_sharded"]


def parse(text: str) -> tuple:
    """(context, module): the program as an MLIR module in a context with JAX's dialects registered (use the
    module inside `with context:`); raises on text that is not one."""
    context = mlir.make_ir_context()
    with context:
        return context, ir.Module.parse(text)


def exported_text(exported) -> str:
    """The program of a jax.export Exported as text without its debug locations (which name the kernel's files and
    lines), as Lowered.as_text() prints a jax.jit lowering: read in the grading kernel, handed over."""
    context, module = parse(exported.mlir_module())
    with context:
        return module.operation.get_asm(enable_debug_info=False)


def refine(text: str, length: int) -> str:
    """A program jax.export lowered for every length n (jax.export.symbolic_shape, `tensor<?x...>` arguments) as
    the static program for n = length, as jax does when it calls an exported function: a new public main takes
    the static arguments (with the old main's argument and result attributes, its donation included), converts
    them to the old main's dynamic types and calls it; StableHLO's shape refinement then makes every shape
    static, checks the program's shape assertions and removes them. Raises on a program that is not one (no
    main, another signature) or whose assertions fail for this length."""
    from jax._src.lib.mlir.dialects import func, hlo  # private: guarded by the canary

    context, module = parse(text)
    with context, ir.Location.unknown():
        old = ir.SymbolTable(module.operation)["main"]
        ftype = ir.FunctionType(ir.TypeAttr(old.attributes["function_type"]).value)
        static = []
        for type_ in ftype.inputs:
            ranked = ir.RankedTensorType(type_)
            static.append(ir.RankedTensorType.get(
                [length if ranked.is_dynamic_dim(i) else ranked.shape[i] for i in range(ranked.rank)],
                ranked.element_type))
        kept = {a: old.attributes[a] for a in ("arg_attrs", "res_attrs") if a in old.attributes}
        for a in kept:
            del old.attributes[a]
        old.attributes["sym_name"] = ir.StringAttr.get("referee_refined_main")
        old.attributes["sym_visibility"] = ir.StringAttr.get("private")
        with ir.InsertionPoint(module.body):
            new = func.FuncOp("main", (static, list(ftype.results)))
        new.attributes["sym_visibility"] = ir.StringAttr.get("public")
        for a, value in kept.items():
            new.attributes[a] = value
        block = new.add_entry_block()
        with ir.InsertionPoint(block):
            args = [hlo.convert(t, a) if a.type != t else a for a, t in zip(block.arguments, ftype.inputs, strict=True)]
            called = func.CallOp(list(ftype.results), ir.FlatSymbolRefAttr.get("referee_refined_main"), args)
            func.ReturnOp(called.results)
        return str(mlir.refine_polymorphic_shapes(module))


def _cpu():
    return xla_bridge.get_backend("cpu")


def compile_program(text: str, refined_from: tuple | None = None):
    """The program compiled and loaded on the first CPU device, one replica, one partition. (`refined_from` is
    for the memo that replaces this in a referee child, compiled.install.)"""
    backend = _cpu()
    options = compiler.get_compile_options(num_replicas=1, num_partitions=1)
    return backend.compile_and_load(text, executable_devices=xla_client.DeviceList((backend.devices()[0],)),
                                    compile_options=options)


def run(executable, arrays: list) -> list:
    """Run it on JAX arrays (committed to the CPU device); its outputs, one JAX array each. An input the
    program donates is deleted by the run, as with jax.jit."""
    results = executable.execute_sharded(list(arrays))
    return [shards[0] for shards in results.disassemble_into_single_device_arrays()]


def alias_bytes(executable) -> int:
    """How many bytes of the outputs XLA placed in donated inputs' buffers (memory_analysis)."""
    return int(executable.get_compiled_memory_stats().alias_size_in_bytes)


def memory_bytes(executable) -> int:
    """Arguments, outputs and temporaries together, as XLA planned them."""
    s = executable.get_compiled_memory_stats()
    return int(s.argument_size_in_bytes + s.output_size_in_bytes + s.temp_size_in_bytes)


def kept_inputs(lowered) -> list:
    """Which of a jax.jit lowering's flat arguments its program takes (jit drops unused ones, and the
    text does not say which): read in the grading kernel, handed over with the program."""
    return sorted(int(i) for i in lowered._lowering.compile_args["kept_var_idx"])


def set_cpu_devices(n: int) -> None:
    """Ask for n CPU devices; only before the backend starts (the referee's child, before its first array)."""
    import jax

    jax.config.update("jax_num_cpu_devices", n)


def _devices(n: int):
    return xla_client.DeviceList(tuple(_cpu().devices()[:n]))


def compile_sharded(text: str, n: int):
    """A program lowered for n partitions (mhlo.num_partitions), compiled SPMD on the first n CPU devices, as
    jax.jit compiles a sharded function."""
    import numpy as np

    devices = _devices(n)
    if len(devices) != n:
        raise RuntimeError(f"the grader has {len(devices)} CPU devices, not {n}")
    options = compiler.get_compile_options(num_replicas=1, num_partitions=n,
                                           device_assignment=np.arange(n).reshape(1, n))
    options.executable_build_options.use_spmd_partitioning = True
    return _cpu().compile_and_load(text, executable_devices=devices, compile_options=options)


def shardings(executable) -> tuple:
    """([input sharding], [output sharding]) as XLA compiled them, as HloSharding text ('{devices=[8]<=[8]}')."""
    return ([str(xla_client.HloSharding.from_proto(s)) for s in executable.get_parameter_shardings()],
            [str(xla_client.HloSharding.from_proto(s)) for s in executable.get_output_shardings()])


def put_sharded(values, executable, i: int, n: int):
    """values laid out over the n devices as the executable's argument i is."""
    import jax
    from jax._src.sharding_impls import GSPMDSharding  # private: guarded by the canary

    return jax.device_put(values, GSPMDSharding(_devices(n), executable.get_parameter_shardings()[i]))


def run_sharded(executable, arrays: list, shapes: list, n: int) -> list:
    """Run it on arrays laid out as its arguments are; its outputs (of these shapes), one global JAX array each,
    laid out as it compiled them. Donated inputs are deleted by the run, as with jax.jit."""
    import jax
    from jax._src.sharding_impls import GSPMDSharding  # private: guarded by the canary

    results = executable.execute_sharded(list(arrays)).disassemble_into_single_device_arrays()
    return [jax.make_array_from_single_device_arrays(tuple(shape), GSPMDSharding(_devices(n), sharding), shards)
            for shape, sharding, shards in zip(shapes, executable.get_output_shardings(), results, strict=True)]
