"""The referee: the graded points of lessons 1 to 7 (but those asks.KERNEL_ONLY lists) decided in a
process where no learner code runs.

The learner's kernel hands answers over as data only: asks.py says what is
asked for, and hidden/handover.py, in the kernel, writes each jax.jit answer
as the StableHLO programs it lowers to for the referee's signatures, with
their donation attributes, and lesson 5's answers as values (bytes, text). After nbgrader's autograde the worker
(student.py) reads that hand-over as untrusted bytes and sends it to its
referee server (client.py): a sandboxed process, started once per worker
(server.py), that forks a capped child per answer. The child screens each
program (screen.py: no custom calls, host callbacks or I/O, bounded
sizes), compiles it for the CPU backend and runs it on its own arrays
(programs.py, the one module that uses JAX's private APIs), and judges
values, donation, buffer reuse and a training loop against its own
reference (judge.py), one Verdict per check (verdict.py). What the worker,
the server and its children say to each other are wire.py's typed messages,
as JSON lines: data only, never pickles. combine.py joins
each verdict to the kernel's score of the same grade cell: a point needs
both, and a pass the kernel claims that the referee refutes flags the row.
"""
