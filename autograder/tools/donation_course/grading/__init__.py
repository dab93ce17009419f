"""Class-scale grading on top of nbgrader: `./course grade`.

One sub-package per concern, in the order a run meets them: run/ (the
settings, the command line, the steps in order, the state file and the run
lock, the assignment and compile cache prepared, deadlines) -> submissions/
with lms/ (which file is whose, one file per LMS; staged into submitted/,
repaired) -> executors/ (the local pool of forked workers, or a Dask
cluster; nbgrader in process, one student at a time) -> integrity/ (the
static scan, each kernel capped, sandboxed and audited) and referee/ (the
graded points decided where no learner code runs) -> results/ (a typed
result per student, one gradebook transaction each, reviews kept) ->
reports/ (grades.csv, the LMS import files, the class report, the
learner's page and feedback). docs/design.md says where a change goes.
"""
