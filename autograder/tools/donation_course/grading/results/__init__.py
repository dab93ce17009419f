"""The results and the gradebook: the typed result of one student (result.py), merged in one transaction per
student into nbgrader's gradebook, keeping formgrader's work (gradebook.py); reviews tied to a digest of the
answers they judged (reviews.py), and a flagged result's withheld scores put back on request (accept.py)."""
