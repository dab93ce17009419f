"""What a process that forks JAX users does once, before it forks: the kernel zygote (kernel_zygote.py) before
each grading kernel, the referee server (referee/server.py) before each child.

Each forked process would otherwise do it again on its first program: JAX looks for PJRT plugins (every
installed distribution's entry points) before it starts a backend, about 6 ms, and imports the MLIR dialects'
Python modules (mhlo, chlo, sdy, mpmd, builtin) when it makes its first MLIR context, about 10 ms. Neither starts
a backend or a thread (test_upstream_private_apis.py, for jax 0.12.0.1), so the fork stays sound; the zygote
checks its one thread after it anyway.
"""


def prepare_jax_for_forks() -> None:
    from jax._src import xla_bridge
    from jax._src.lib.mlir import dialects

    xla_bridge._discover_and_register_pjrt_plugins()
    for name in ("mhlo", "chlo", "hlo", "sdy", "mpmd", "builtin"):
        getattr(dialects, name, None)  # the lazy loader imports it
