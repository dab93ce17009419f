"""The class report (issue 23): its page and plot render, and every figure on the
page is what nbgrader's gradebook (and its submitted/ folder) says, computed
here with nbgrader's own API, not with the grader's rows."""
import statistics
from html.parser import HTMLParser

from donation_course.course import COURSE, Course
from synthetic_class import Student, build_class

EX = COURSE.exercise
CLASS = {"ann": Student({EX: 1.0}), "ben": Student({EX: 0.5, "02_the_contract": 1.0}),
         "1001": Student({EX: 0.25}, late_penalty=2.0, minutes_late=90),
         "bob": Student({EX: 1.0}, kind="flagged"), "cat": Student({EX: 1.0}, kind="error"),
         "eve": Student({EX: 0.0}, kind="flagged", by_hand={EX: 1.0})}


class Tables(HTMLParser):
    """{table id: [[cell text]]} of a page."""

    def __init__(self):
        super().__init__()
        self.tables, self.current, self.row = {}, None, None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.current = self.tables.setdefault(dict(attrs)["id"], [])
        elif tag == "tr":
            self.row = []
            self.current.append(self.row)
        elif tag in ("td", "th"):
            self.row.append("")

    def handle_data(self, data):
        if self.row is not None and self.row:
            self.row[-1] += data

    def handle_endtag(self, tag):
        if tag == "table":
            self.current, self.row = None, None


def from_gradebook(course: Course) -> dict:
    """The report's figures, straight from nbgrader: LMS grades (every notebook, after the late penalty; none
    while a cell waits for a person), and per check: students graded on it (notebook submitted, not waiting)
    and passed (full marks)."""
    from nbgrader.api import Gradebook

    scores, checks, people = [], {}, {}
    with Gradebook(course.db_url) as gb:
        for sub in gb.find_assignment(course.assignment).submissions:
            sid = sub.student.id
            if not sub.needs_manual_grade:
                scores.append(round(sub.score - sub.late_submission_penalty, 3))
            people[sid] = sub.total_seconds_late > 0
            for nb in sub.notebooks:
                handed_in = (course.root / "submitted" / sid / course.assignment / f"{nb.name}.ipynb").is_file()
                for g in nb.grades:
                    graded, passed = checks.setdefault(f"{nb.name}:{g.name}", [0, 0])
                    counts = handed_in and not g.needs_manual_grade
                    checks[f"{nb.name}:{g.name}"] = [graded + counts, passed + (counts and g.score >= g.max_score)]
    return {"scores": scores, "checks": checks, "late": sorted(s for s, late in people.items() if late)}


def test_the_class_report_shows_the_gradebooks_figures(tmp_path, generated_course):
    from donation_course.grading.reports.class_report import write_class_report

    course = Course(generated_course(tmp_path / "course"))
    summaries = build_class(course.root, CLASS)
    page = write_class_report(course, summaries, tmp_path / "out")
    assert (tmp_path / "out" / "class-report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    parser = Tables()
    parser.feed(page.read_text())
    tables, truth = parser.tables, from_gradebook(course)

    summary = {row[0]: row[1] for row in tables["summary"][1:]}
    s = truth["scores"]
    assert summary["students"] == str(len(CLASS)) and summary["with a grade"] == str(len(s))
    assert summary["blank (waiting, or not graded)"] == str(len(CLASS) - len(s)) == "2"  # bob waits, cat errored
    assert summary["mean"] == f"{statistics.fmean(s):.2f}" and summary["median"] == f"{statistics.median(s):.2f}"
    assert (summary["lowest"], summary["highest"]) == (f"{min(s):g}", f"{max(s):g}")
    assert sum(int(n) for _, n in tables["distribution"][1:]) == len(s)

    shown = {row[0]: [int(row[2]), int(row[3])] for row in tables["checks"][1:]}
    assert shown == truth["checks"]
    rates = [int(p) / int(g) for _, _, g, p, _ in tables["checks"][1:] if int(g)]
    assert rates == sorted(rates)  # the checks most students fail come first
    assert any(int(g) and int(p) < int(g) for _, _, g, p, _ in tables["checks"][1:])

    listed = {(row[0], row[1]) for row in tables["students"][1:]}
    assert {("bob", "flagged"), ("eve", "flagged"), ("cat", "not graded")} <= listed
    assert sorted(sid for sid, what in listed if what == "late") == truth["late"] == ["1001"]
