"""The class report (issue 23): its page and its two charts render, and every
figure on the page is what nbgrader's gradebook (and its submitted/ folder)
says, computed here with nbgrader's own API, not with the grader's rows."""
import re
import statistics
from html.parser import HTMLParser

from donation_course.course import COURSE, Course
from synthetic_class import Student, build_class

EX = COURSE.exercise
CLASS = {"ann": Student({EX: 1.0}), "ben": Student({EX: 0.5, "02_the_contract": 1.0}),
         "1001": Student({EX: 0.25}, late_penalty=2.0, minutes_late=90), "dan": Student({EX: 0.0}),
         "fay": Student({"02_the_contract": 0.0}),  # lesson 2's checks: ben passes, fay fails: 50%, not red
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


class Charts(HTMLParser):
    """The page's two charts: the distribution's columns [(count shown, height %)] and tick labels, and the
    pass-rate bars [(check, width %, drawn red, rate shown)]."""

    def __init__(self):
        super().__init__()
        self.columns, self.ticks, self.bars = [], [], []
        self.chart, self.spot = None, None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "figure":
            self.chart = attrs["id"]
        classes = (attrs.get("class") or "").split()
        width = re.search(r"(?:height|width):([\d.]+)%", attrs.get("style") or "")
        if self.chart == "distribution-chart":
            if "n" in classes:
                self.columns.append(["", None])
                self.spot = "count"
            elif "bar" in classes:
                self.columns[-1][1] = float(width.group(1))
            elif tag == "span" and not classes:
                self.ticks.append("")
                self.spot = "tick"
        elif self.chart == "pass-rate-chart" and tag == "span":
            if "fill" in classes:
                self.bars[-1][1:3] = [float(width.group(1)), "low" in classes]
            elif not classes:
                if self.bars and self.bars[-1][3] is None and self.bars[-1][1] is not None:
                    self.bars[-1][3] = ""
                    self.spot = "rate"
                else:
                    self.bars.append(["", None, None, None])
                    self.spot = "check"

    def handle_data(self, data):
        if self.spot == "count":
            self.columns[-1][0] += data
        elif self.spot == "tick":
            self.ticks[-1] += data
        elif self.spot == "check":
            self.bars[-1][0] += data
        elif self.spot == "rate":
            self.bars[-1][3] += data

    def handle_endtag(self, tag):
        self.spot = None
        if tag == "figure":
            self.chart = None


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
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "class-report.png").write_bytes(b"an earlier version's plot")
    page = write_class_report(course, summaries, tmp_path / "out")
    assert not (tmp_path / "out" / "class-report.png").exists()  # no stale picture beside the page
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

    # the charts draw the tables' figures: a column per bin, as high as its share of the fullest bin
    charts = Charts()
    charts.feed(page.read_text())
    bins = [(label, int(n)) for label, n in tables["distribution"][1:]]
    fullest = max(n for _, n in bins)
    assert charts.ticks == [label for label, _ in bins]
    assert charts.columns == [[str(n), round(100 * n / fullest, 1)] for _, n in bins]
    heights = {height for _, height in charts.columns}
    assert {0.0, 100.0} <= heights and any(0 < h < 100 for h in heights)  # empty, fullest, and in between
    # a bar per check graded on, in the table's order, as wide as its pass rate, red below 50% only
    graded = [(check, int(p) / int(g)) for check, _, g, p, _ in tables["checks"][1:] if int(g)]
    assert charts.bars == [[check, round(100 * rate, 1), rate < 0.5, f"{100 * rate:.1f}%"] for check, rate in graded]
    assert {low for _, _, low, _ in charts.bars} == {True, False}  # red below 50%, blue from 50%
    assert any(rate == 0.5 for _, rate in graded)  # the edge itself: blue


def test_the_charts_of_a_class_with_no_grade_yet_say_so():
    from donation_course.grading.reports.class_report import ClassFigures, distribution_chart, pass_rate_chart

    empty = ClassFigures(students=0, scores=[], max_points=0.0, blank=0, checks=[], flagged=[], failed=[], late=[])
    charts = Charts()
    charts.feed(distribution_chart(empty) + pass_rate_chart(empty))
    assert charts.columns == [["0", 0.0]] and charts.ticks == ["0-1"] and charts.bars == []
    assert "No check graded yet." in pass_rate_chart(empty)
