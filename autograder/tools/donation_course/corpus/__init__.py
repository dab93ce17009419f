"""Corpora of answers to the graded notebook, each case with the score and
status `./course grade` must give it: `exercise` (update_with_donate, and
every kind of broken, tampering or hostile submission), `capstone` (the
training-state update) and `debugging` (lesson 3's training loop with one
donation bug). The test suite grades them (tests/test_grading_*.py)
and the grading benchmark times them; an instructor who changes a hidden
check adds a case here. Instructor-only: it holds right answers.

    python -m donation_course.corpus.exercise DEST   # DEST/<student>_<notebook>.ipynb
    python -m donation_course.corpus.capstone DEST
    python -m donation_course.corpus.debugging DEST
"""
