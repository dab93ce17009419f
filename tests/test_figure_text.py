"""Every figure the lessons make, drawn as they draw it: no text outside its
figure, no label of a data point outside its axes or under the legend.

The lessons' own figure cells are run from the source notebooks (by cell id),
so a change to a lesson's plotting is tested as written. Measured numbers are
replaced by stand-ins with the sizes a learner meets, the untidy ones
included (the 72.3 MiB bar, 113 to 131% of one array, an 8 MiB array over 10
steps). Lesson 6 needs 8 devices, so its figure is drawn in a process of its
own and comes back pickled.
"""
import pickle
import subprocess
import sys
import warnings

import matplotlib
import nbformat
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402

from donation_course.course import COURSE  # noqa: E402
from donation_lab.explorer import chart_figure  # noqa: E402
from donation_lab.memory import LoopMeasurement  # noqa: E402

MiB = 2 ** 20
TOLERANCE = 0.5  # pixels


def cells(lesson: str, *ids: str) -> list:
    """The given cells of a source lesson, in the order given."""
    nb = nbformat.read(COURSE.source / lesson, as_version=4)
    found = {c.get("id"): c for c in nb.cells}
    missing = [i for i in ids if i not in found]
    assert not missing, f"{lesson} has no cell {missing}: update this test"
    return [found[i] for i in ids]


def run_cells(lesson: str, *ids: str, **names):
    """Run the cells in a fresh namespace holding `names`, one after another as
    Run All does (a cell tagged raises-exception may raise; the run goes on);
    return the figure they drew."""
    plt.close("all")
    namespace = {"plt": plt, **names}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # plt.show() under Agg says it cannot show
        for cell in cells(lesson, *ids):
            try:
                exec(compile(cell.source, f"{lesson}:{cell.id}", "exec"), namespace)
            except Exception:
                if "raises-exception" not in cell.metadata.get("tags", []):
                    raise
    return plt.gcf()


def inside(inner, outer) -> bool:
    return (inner.x0 >= outer.x0 - TOLERANCE and inner.y0 >= outer.y0 - TOLERANCE
            and inner.x1 <= outer.x1 + TOLERANCE and inner.y1 <= outer.y1 + TOLERANCE)


def layout_problems(fig) -> list:
    """Readable lines, [] when every text is where it can be read whole."""
    if not isinstance(fig.canvas, FigureCanvasAgg):
        FigureCanvasAgg(fig)  # a bare Figure (the explorer's) has no canvas of its own
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    problems = []

    def check(text, box, where):
        if text.get_visible() and text.get_text().strip():
            if not inside(text.get_window_extent(renderer), box):
                problems.append(f"{text.get_text()!r} reaches outside {where}")

    for text in fig.texts + [t for legend in fig.legends for t in legend.get_texts()]:
        check(text, fig.bbox, "the figure")
    for n, ax in enumerate(fig.axes):
        name = f"axes {n} ({ax.get_title()!r})"
        legend = ax.get_legend()
        for text in [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label]:
            check(text, fig.bbox, "the figure")
        for axis in (ax.xaxis, ax.yaxis):  # the tick labels drawn
            if ax.axison and axis.get_visible() and not inside(axis.get_tightbbox(renderer) or fig.bbox, fig.bbox):
                problems.append(f"the tick labels of {name} reach outside the figure")
        if legend is not None:
            check(legend.get_title(), fig.bbox, "the figure")
            for text in legend.get_texts():
                check(text, fig.bbox, "the figure")
        for text in ax.texts:  # labels of the data: bar values, point values, names in boxes
            check(text, ax.get_window_extent(renderer), name)
            check(text, fig.bbox, "the figure")
            if legend is not None and text.get_window_extent(renderer).overlaps(legend.get_window_extent(renderer)):
                problems.append(f"{text.get_text()!r} is under the legend of {name}")
    return problems


def measured(array_mib, without, with_=None, measure="process peak RSS (CPU)"):
    """{False: ..., True: ...} as compare_donation returns them; `without` and
    `with_` in fractions of one array, per step."""
    nbytes = int(array_mib * MiB)
    with_ = with_ or [0.0] * len(without)
    return {donate: LoopMeasurement(n_elements=nbytes // 4, steps=len(without), donate=donate,
                                    array_bytes=nbytes, live_bytes=2 * nbytes, measure=measure,
                                    extra_per_step=[int(f * nbytes) for f in (with_ if donate else without)])
            for donate in (False, True)}


CASES = {
    "64 MiB, one copy per step": measured(64, [1.0, 1.0, 1.0]),
    "64 MiB, 113 to 131%": measured(64, [1.0, 1.13, 1.31]),
    "72.3 MiB of 64": measured(64, [72.3 / 64]),
    "8 MiB over 10 steps": measured(8, [1.0, 0.98, 1.5, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0], [0.002] * 10),
    "256 MiB on a GPU": measured(256, [1.0, 1.0], measure="device peak_bytes_in_use (GPU)"),
}


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_lesson_1_buffer_boxes():
    """Each name also lies inside its box."""
    fig = run_cells("01_why_donate.ipynb", "l1-setup", "l1-fresh", "l1-donate", "l1-picture")
    assert len(fig.axes) == 2 and layout_problems(fig) == []
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        boxes = [p.get_window_extent(renderer) for p in ax.patches]
        for text in ax.texts:
            extent = text.get_window_extent(renderer)
            assert any(inside(extent, box) for box in boxes), f"{text.get_text()!r} is not inside its box"


@pytest.mark.parametrize("case", CASES)
def test_lesson_1_peak_bars(case):
    fig = run_cells("01_why_donate.ipynb", "l1-plot", results=CASES[case], SIZE_MIB=64, MiB=MiB)
    assert layout_problems(fig) == []


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("bold", [False, True])
def test_the_memory_explorers_chart(case, bold):
    results = CASES[case]
    assert layout_problems(chart_figure(results[False], results[True], results[bold])) == []


def test_lesson_3_matching():
    import jax
    import jax.numpy as jnp

    fig = run_cells("03_pitfalls.ipynb", "l3-picture", jax=jax, jnp=jnp)
    assert layout_problems(fig) == []


def test_lesson_4_losses():
    losses = [10.0 * 0.85 ** k for k in range(60)]
    assert layout_problems(run_cells("04_pytrees.ipynb", "l4-plot", losses=losses)) == []


def test_lesson_6_shards(tmp_path):
    out = tmp_path / "figure.pickle"
    code = ("import pickle, matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot as plt\n"
            + "\n\n".join(c.source for c in cells("06_shardings.ipynb", "l6-flags", "l6-mesh")) + "\n"
            f"pickle.dump(plt.gcf(), open({str(out)!r}, 'wb'))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    fig = pickle.loads(out.read_bytes())
    assert len(fig.axes) == 2 and layout_problems(fig) == []


def test_the_checker_sees_a_clipped_label_and_one_under_the_legend():
    """The case that was reported: a bar label above the axes' top, a title
    pushed out of the figure, and a value label under the legend."""
    fig, ax = plt.subplots(figsize=(5, 2.5))
    bars = ax.bar(["without donation", "with donation"], [72.3, 0.0])
    ax.bar_label(bars, fmt="%.1f MiB")  # auto limits: no room above the tallest bar
    ax.set_title("a title", y=1.3)
    ax.text(0.5, 0.5, "covered", transform=ax.transAxes, ha="center")
    ax.legend(["a legend over the middle"], loc="center")
    problems = layout_problems(fig)
    assert any("'72.3 MiB' reaches outside axes 0" in p for p in problems), problems
    assert any("'a title' reaches outside the figure" in p for p in problems), problems
    assert any("'covered' is under the legend" in p for p in problems), problems
