"""The lessons' reference parts are not run when grading.

A lesson's reference part (its cells from the first "Going deeper" heading
on, see lesson_size.main_path) holds no grade cell and no answer cell: it
earns nothing. Running it would cost each kernel time (lesson 3's is its
longest part) and run code that shows, on purpose, what a grading kernel
refuses (lesson 6 starts fresh Python processes). So two nbgrader
preprocessors around autograde's Execute set those cells aside and put them
back afterwards, unrun and without outputs (ClearOutput has run before). A
notebook whose later part holds a grade or answer cell is run whole.
"""
from nbgrader.preprocessors import NbGraderPreprocessor

from ...lesson_size import reference_start

SET_ASIDE = "donation_lab_reference_part"  # the resources key that holds the cells set aside


class SetAsideReference(NbGraderPreprocessor):
    def preprocess(self, nb, resources):
        start = reference_start(nb)
        resources[SET_ASIDE] = [] if start is None else nb.cells[start:]
        if start is not None:
            nb.cells = nb.cells[:start]
        return nb, resources


class PutBackReference(NbGraderPreprocessor):
    def preprocess(self, nb, resources):
        nb.cells = [*nb.cells, *resources.pop(SET_ASIDE, [])]
        return nb, resources
