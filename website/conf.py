"""Sphinx configuration of the course's site (`./course site`; see
autograder/tools/donation_course/site/build.py). The notebooks arrive
executed and cleaned: myst-nb only renders them."""
project = "Buffer Donation Lab"
author = "the Buffer Donation Lab authors"
copyright = "the Buffer Donation Lab authors"  # no year: a page holds no date

extensions = ["myst_nb"]
exclude_patterns = ["_build", "**.ipynb_checkpoints"]
myst_heading_anchors = 4   # docs/ link to headings as page.md#slug
# Warnings fail the build (a link that goes nowhere), except a heading level skipped in docs/: style, not a break.
suppress_warnings = ["myst.header"]

# myst-nb: render the outputs as they are; never execute, never load widget JavaScript (it comes from a CDN).
nb_execution_mode = "off"
nb_ipywidgets_js = {}
nb_merge_streams = True
nb_render_markdown_format = "myst"

html_theme = "sphinx_book_theme"
html_title = "Buffer Donation Lab"
html_static_path = ["_static"]
html_css_files = ["site.css"]
html_copy_source = False        # no page's source (no .ipynb) is published
html_show_sourcelink = False
html_last_updated_fmt = None    # no date on a page
html_show_sphinx = False
html_theme_options = {
    "use_download_button": False,   # the solved notebook never goes out; a lesson runs from its own links
    "use_fullscreen_button": False,
    "use_repository_button": False,
    "use_source_button": False,
    "use_edit_page_button": False,
    "use_issues_button": False,
    "launch_buttons": {},
    "show_toc_level": 2,
    "home_page_in_toc": True,
}
