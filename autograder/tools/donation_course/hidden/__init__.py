"""Hidden checks, run only by the grading kernel.

They live with the instructor's tools, never in the learner's package; the
grading kernel imports them at start-up (see autograder/nbgrader_config.py),
before any submitted code runs.
"""
