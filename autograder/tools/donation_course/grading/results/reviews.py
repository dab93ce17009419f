"""A person's review belongs to the code it was made on.

nbgrader's gradebook keeps a manual score, a comment and extra credit
through every autograde, whatever was submitted, and its autograde marks
each manually scored cell `needs_manual_grade` again. The gradebook stays
exactly that (gradebook.merge writes what serial `nbgrader autograde`
writes). What it cannot say is which code a review was made on; the grader
keeps that beside it, per student and notebook, in the state file
(result.Summary.reviews): the digest of the notebook's answers when the
review was seen (`answer_digest`), the manual scores, comments and extra
credit a person entered, and the automatic scores the instructor accepted
for a flagged notebook (accept.py).

- Unchanged answers: the review still counts. Its manual scores are the
  student's grade (report.py's `waiting` is false for those cells, so the
  LMS files and the class report show the reviewed score), and an accepted
  flag is accepted again: the withheld automatic score goes back into the
  gradebook as the automatic score, as serial nbgrader would have given it.
- Changed answers: the review no longer counts. Manually scored cells wait
  for the instructor (nbgrader's own needs_manual_grade), an acceptance is
  not applied (a flagged notebook stays flagged, with no points), and the
  student's reason says what changed since which review.
An accepted score is never stored as a manual score, so it cannot outlive
the code it was accepted for.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path


def answer_digest(path: Path) -> str:
    """The digest of what a student answered in one notebook: the source of
    every nbgrader solution cell, by grade id ('' when the file cannot be
    read). Outputs, metadata and cells the student may not edit do not count,
    so re-saving or re-running the same answers changes nothing."""
    try:
        book = json.loads(path.read_text(encoding="utf-8"))
        answers = []
        for cell in book.get("cells", []):
            meta = (cell.get("metadata") or {}).get("nbgrader") or {}
            if meta.get("solution"):
                source = cell.get("source", "")
                answers.append([str(meta.get("grade_id", "")), "".join(source) if isinstance(source, list)
                                else str(source)])
    except (OSError, UnicodeDecodeError, ValueError, AttributeError, TypeError):
        return ""
    return hashlib.sha256(json.dumps(answers).encode()).hexdigest()[:20]


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def empty(review: dict) -> bool:
    return not any(review.get(k) for k in ("scores", "accepted", "comments", "extra"))


def capture(review: dict | None, graded_content: str, grades, comments) -> dict | None:
    """The review of one notebook as the gradebook holds it now, before a
    regrade rewrites it. A cell a person scored since the last grading
    (manual score, not waiting: formgrader's save) is a review of
    `graded_content`, the answers graded last; so are the comments and extra
    credit there now. A manual score still waiting was seen at an earlier
    regrade and is in `review` already."""
    fresh = {g.name: g.manual_score for g in grades if g.manual_score is not None and not g.needs_manual_grade}
    said = {c.name: c.manual_comment for c in comments if c.manual_comment}
    extra = {g.name: g.extra_credit for g in grades if g.extra_credit}
    known = review or {}
    new = fresh or any(known.get("comments", {}).get(k) != v for k, v in said.items()) or \
        any(known.get("extra", {}).get(k) != v for k, v in extra.items())
    if review is None or (review.get("content") != graded_content and new):
        if not new:
            return review
        review = {"content": graded_content, "when": now(), "scores": {}, "accepted": {}, "comments": {},
                  "extra": {}}
    if review.get("content") == graded_content:
        review["scores"] = {**review.get("scores", {}), **fresh}
        review["comments"], review["extra"] = said, extra
    return review


def counts(review: dict | None, content: str) -> bool:
    """Whether `review` was made on the answers `content`."""
    return bool(review) and bool(content) and review.get("content") == content


def reviewed_cells(review: dict | None, content: str, grades) -> set:
    """The cells whose manual score is a person's review of `content` (they do not wait, whatever
    nbgrader's needs_manual_grade says after a regrade)."""
    if not counts(review, content):
        return set()
    scores = review.get("scores", {})
    return {g.name for g in grades if g.manual_score is not None and g.name in scores
            and scores[g.name] == g.manual_score}


def stale_line(nb: str, review: dict) -> str:
    """The reason a student waits again: their answers changed since this review."""
    parts = []
    for key, what in (("scores", "manual score"), ("accepted", "accepted automatic score"),
                      ("comments", "comment"), ("extra", "extra credit")):
        if review.get(key):
            parts.append(f"{what} of {', '.join(sorted(review[key]))}")
    return (f"{nb}: the answers changed since your review of {review.get('when', 'an earlier grading')} "
            f"({'; '.join(parts)}); that review no longer counts: review this version")
