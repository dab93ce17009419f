"""Buffer Donation Lab: the instructor's course tools.

Regenerating the learner copies, grading a class with nbgrader, and the
hidden checks. Learners never install this package: their environment
(`./course lab`, Binder) holds only `donation_lab`, the helpers the lessons
import. See the README's "Where a change goes".
"""
__version__ = "0.1.0"
