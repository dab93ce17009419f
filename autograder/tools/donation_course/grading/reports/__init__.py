"""Reports: grades.csv (report.py), the LMS import files (exports.py), the class report (class_report.py), the
learner's page (student_page.py) and nbgrader's feedback with hidden tests removed (feedback.py), feedback made
again after manual grading (refresh_feedback.py), and what a learner and an instructor read about a graded
notebook (messages.py)."""
