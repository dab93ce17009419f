"""The referee's only use of JAX's private APIs: parse a StableHLO program,
compile it for the CPU backend and run it on arrays, as jax.jit does inside.

JAX has no public way to compile a program handed over as text (jax.export
runs a program only inside a jit of its own, which decides donation itself,
so it could not show what the learner's program donates). Each function
here is guarded by tests/test_upstream_private_apis.py: after a JAX upgrade,
that test names what to re-check.
"""
from __future__ import annotations

from jax._src import compiler, xla_bridge  # private: guarded by the canary
from jax._src.interpreters import mlir  # private: guarded by the canary
from jax._src.lib import xla_client  # private: guarded by the canary
from jax._src.lib.mlir import ir  # private: guarded by the canary

__all__ = ["ir", "parse", "compile_program", "run", "alias_bytes", "memory_bytes", "kept_inputs"]


def parse(text: str) -> tuple:
    """(context, module): the program as an MLIR module in a context with JAX's dialects registered (use the
    module inside `with context:`); raises on text that is not one."""
    context = mlir.make_ir_context()
    with context:
        return context, ir.Module.parse(text)


def _cpu():
    return xla_bridge.get_backend("cpu")


def compile_program(text: str):
    """The program compiled and loaded on the first CPU device, one replica, one partition."""
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
