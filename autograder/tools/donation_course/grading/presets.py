"""LMS export presets: which file is whose, one `Preset` per LMS, in a registry.

Every preset is a `named_regexp` for nbgrader's `FileNameCollectorPlugin`
(groups `student_id` and `file_id`, optionally `timestamp`; ours add `name`
for the display name, `late` for Canvas's late flag and `attempt` for
Canvas's resubmission suffix), matched against each file's path relative
to the export (a zip's inner folders are allowed in front). `{assignment}`
stands for the assignment's name.

A new LMS is one `register(Preset(...))` call below: `--lms NAME` accepts
it, and when the export's naming is not given, the preset that matches
the most notebooks is used (`detect`), the `flat` one if none does.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

PREFIX = r"(?:.*/)?"  # any folders of the export or zip in front


@dataclass(frozen=True)
class Preset:
    name: str
    pattern: str       # a FileNameCollectorPlugin.named_regexp
    layout: str        # the file naming, for people
    detected: bool = True  # tried by detect(); the fallback is not

    def regexp(self, assignment: str) -> str:
        return self.pattern.replace("{assignment}", re.escape(assignment))


PRESETS: dict[str, Preset] = {}
FALLBACK = "flat"


def register(preset: Preset) -> Preset:
    PRESETS[preset.name] = preset
    return preset


register(Preset(
    "nbgrader", PREFIX + r"(?P<student_id>[^/]+)/{assignment}/(?P<file_id>[^/]+)$",
    "<student>/<assignment>/<notebook>.ipynb (+ timestamp.txt)"))
register(Preset(
    "canvas", PREFIX + r"(?P<name>[^/_]*)_(?:(?P<late>LATE)_)?(?P<student_id>\d+)_(?P<submission>\d+)_"
                       r"(?P<file_id>[^/]+?)(?:-(?P<attempt>\d+))?(?P<ext>\.[^./]+)$",
    "<lastfirst>_[LATE_]<userid>_<submissionid>_<original>[-N].ipynb"))
register(Preset(
    "blackboard", PREFIX + r"(?P<assignment>[^/]*)_(?P<student_id>[^/_]+)_attempt_"
                           r"(?P<timestamp>\d{4}-\d\d-\d\d-\d\d-\d\d-\d\d)_(?P<file_id>[^/]+)$",
    "<Assignment Name>_<username>_attempt_<YYYY-MM-DD-HH-MM-SS>_<original>.ipynb (+ a .txt receipt; "
    "the username is the last `_`-free word before `_attempt_` unless the receipt names it)"))
register(Preset(
    "moodle", PREFIX + r"(?P<name>[^/]+?)_(?P<student_id>\d+)_assignsubmission_(?:file|onlinetext)"
                       r"(?:_|_?/(?:.*/)?)(?P<file_id>[^/]+)$",
    "<Full Name>_<participant id>_assignsubmission_file_<original>.ipynb, or a folder of that name"))
register(Preset(
    FALLBACK, PREFIX + r"(?P<student_id>[^/_]+)(?:_(?P<file_id>[^/]+?))?\.ipynb$",
    "<student>_<notebook>.ipynb (the id may hold `_`), or <student>[_anything].ipynb for the exercise",
    detected=False))


def detect(rels: list[str], assignment: str) -> str:
    """The detected preset that matches the most notebooks, or the fallback."""
    best, hits = FALLBACK, 0
    for preset in PRESETS.values():
        if not preset.detected:
            continue
        rx = re.compile(preset.regexp(assignment))
        n = sum(1 for r in rels if r.endswith(".ipynb") and rx.match(r))
        if n > hits:
            best, hits = preset.name, n
    return best
