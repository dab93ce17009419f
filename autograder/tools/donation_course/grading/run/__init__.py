"""The run and its set-up: every setting in one object (settings.py), the command lines of `./course grade`
and `./course check` (cli.py, selfcheck.py), the steps in order (steps.py: collect, lock, prepare, plan, stage,
back up, grade, report), the state file and the run lock (state.py), the assignment generated and the compile
cache filled when what they come from changed (prepare.py, compile_cache.py), extensions and the late penalty
(deadlines.py), and the progress bar (progress.py)."""
