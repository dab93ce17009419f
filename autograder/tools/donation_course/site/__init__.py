"""The course's static site (`./course site`): the executed lessons and the
instructors' docs, rendered by Sphinx with myst-nb, with no answer in them.

build.py    the flow: run the solved lessons, make the pages, render, check, publish
pages.py    one lesson page from the learner's copy and the solved copy's run
widgets.py  a widget as the static picture its run left
scrub.py    outputs cleaned of the build machine's paths, names and dates
leaks.py    what no page may hold (solutions, hidden tests, nbgrader delimiters), and the search for it
"""
