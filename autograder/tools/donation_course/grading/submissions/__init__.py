"""Collecting the submissions: a zip or notebook extracted and each file matched to a student and a notebook
through the LMS's naming (collect.py, with lms/), another course's notebook refused (foreign.py), and each
student's files staged into submitted/ with deleted or duplicated graded cells repaired (repair.py)."""
