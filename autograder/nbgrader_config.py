"""nbgrader configuration for the Buffer Donation Lab course.

This folder is an nbgrader course: `source/<assignment>/` holds the
instructor notebooks (solutions and hidden tests), `tools/` the instructor's
course tools (the donation_course package). Everything else nbgrader
makes here (release/, submitted/, autograded/, feedback/, gradebook.db) is
local state and ignored by git.
"""
import os

c = get_config()  # noqa: F821 (provided by nbgrader when it loads this file)

c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.course_id = "buffer-donation-lab"

# Student stubs: what an unanswered cell raises.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# A cell may run at most this long during validate/autograde. The grading
# command also bounds each whole submission (time and memory).
c.Execute.timeout = 60
# Kernel options, also for the grading command's kernels (it adds to this
# list, never replaces it): no IPython history file (grade cells' source must
# not land in ~/.ipython), and the hidden checks imported at kernel start, so
# they capture numpy's and jax's helpers before any submitted code runs. They
# live with the instructor's tools (autograder/tools/donation_course/hidden/),
# which learners never install.
c.Execute.extra_arguments = [
    "--HistoryManager.hist_file=:memory:",
    "--IPKernelApp.exec_lines=import donation_course.hidden.exercise",
    "--IPKernelApp.exec_lines=import donation_course.hidden.capstone",
    "--IPKernelApp.exec_lines=import donation_course.hidden.debugging",
    "--IPKernelApp.exec_lines=import donation_course.hidden.handover",
    "--IPKernelApp.exec_lines=import donation_course.hidden.lessons",
]

# solutions/ = the source with answers kept and hidden tests removed, no
# outputs. Executing them is the test suite's job, not generate_solution's.
c.GenerateSolution.preprocessors = [
    "nbgrader.preprocessors.IncludeHeaderFooter",
    "nbgrader.preprocessors.LockCells",
    "nbgrader.preprocessors.ClearOutput",
    "nbgrader.preprocessors.ClearMarkScheme",
    "nbgrader.preprocessors.ClearHiddenTests",
]

# Feedback HTML: strip hidden-test source and tracebacks from grade cells,
# keeping each check's learner message, and show what a learner wrote as text,
# never as HTML or script (autograder/tools/donation_course/grading/reports/feedback.py).
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "donation_course.grading.reports.feedback.StripHiddenTests",
    "donation_course.grading.reports.feedback.LearnerContentAsText",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]
