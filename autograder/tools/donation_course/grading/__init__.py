"""Class-scale grading on top of nbgrader: `./course grade`.

The flow, one file a step: settings.py (every limit and cap) -> cli.py
(flags) -> run.py (orders the steps) -> collect.py with lms/ (which
file is whose, one file per LMS, staged into submitted/, repaired by
repair.py) -> scan.py (the static policy) -> pool.py (the local executor)
-> worker.py (nbgrader in process, one student at a time) -> kernel.py and
sandbox.py (each kernel capped and sandboxed; fastkernel.py is its client,
compile_cache.py its read-only JAX cache) -> result.py (a typed result per
student) -> gradebook.py (one transaction per student) -> report.py and
student_page.py (grades.csv, the learner's page), exports.py with lms/
(the import files of the LMS the class came from).
On a Dask cluster (--scheduler), cluster.py takes pool.py's place: the
course as a bundle (bundle.py), each worker admitted and served by
cluster_worker.py, grading processes forked from a zygote (zygote.py,
grader_process.py), the figures in cluster_log.py.
docs/design.md says where a change goes.
"""
