"""Buffer Donation Lab: helpers for the lessons, the self-checks and grading.

Kept light on import: the lessons and the autograder import this package in
every kernel, so heavy modules (matplotlib, ipywidgets, nbgrader) load only
in the submodules that need them.
"""
__version__ = "0.1.0"

__all__ = ["explain_donation"]


def __getattr__(name):
    # Lazy re-export: `from donation_lab import explain_donation` works
    # without paying for the import at package import time.
    if name == "explain_donation":
        from .explain import explain_donation

        return explain_donation
    raise AttributeError(f"module 'donation_lab' has no attribute {name!r}")
