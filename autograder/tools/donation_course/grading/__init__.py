"""Class-scale grading on top of nbgrader (see cli.py)."""
