"""The memory explorer widget: built, measured, and redrawn when a control changes."""
import pytest

pytest.importorskip("ipywidgets")

from donation_lab.explorer import MemoryExplorer, memory_explorer  # noqa: E402
from donation_lab.memory import LoopMeasurement  # noqa: E402


def fake_measure(n_elements, steps):
    """Quick stand-in with the shape of compare_donation's answer."""
    nbytes = n_elements * 4
    return {donate: LoopMeasurement(n_elements=n_elements, steps=steps, donate=donate,
                                    array_bytes=nbytes, live_bytes=2 * nbytes,
                                    extra_per_step=[0 if donate else nbytes] * steps)
            for donate in (False, True)}


def classes(widget):
    return set(widget._dom_classes)


def test_controls_and_css_classes():
    ex = MemoryExplorer(measure=fake_measure)
    assert "donation-explorer" in classes(ex.widget)
    assert "explorer-figures" in classes(ex.figures) and "explorer-chart" in classes(ex.chart)
    assert ex.size.description == "Array size (MiB)" and ex.steps.description == "Steps"
    assert ex.button.description == "Measure" and ex.donate.description == "Highlight: with donation"


def test_measures_on_display_and_draws_a_chart():
    ex = MemoryExplorer(size_mib=16, steps=2, measure=fake_measure)
    assert ex.runs == 1
    assert "16 MiB" in ex.figures.value and "process peak RSS (CPU)" in ex.figures.value
    assert any(o.get("output_type") == "display_data" and "image/png" in o.get("data", {})
               for o in ex.chart.outputs)


def test_changing_a_control_measures_again():
    ex = MemoryExplorer(size_mib=16, steps=2, measure=fake_measure)
    ex.size.value = 32
    assert ex.runs == 2 and "32 MiB" in ex.figures.value and "data-runs='2'" in ex.figures.value
    ex.steps.value = 4
    assert ex.runs == 3 and "4 steps" in ex.figures.value
    bold_before = ex.figures.value
    ex.donate.value = False  # switches the highlight: no new measurement, another row and line in bold
    assert ex.runs == 3 and ex.donate.description == "Highlight: without donation"
    assert ex.figures.value != bold_before
    assert '<tr style="font-weight:bold"><td>without donation' in ex.figures.value
    ex.button.click()
    assert ex.runs == 4


def test_given_results_are_shown_without_measuring_again_and_the_controls_still_measure():
    calls = []

    def counting(n_elements, steps):
        calls.append((n_elements, steps))
        return fake_measure(n_elements, steps)

    made = fake_measure(24 * 2**18, 5)  # 24 MiB of float32, 5 steps: what the lesson's cell above measured
    ex = MemoryExplorer(measure=counting, results=made)
    assert calls == [] and ex.runs == 1 and ex.results is made
    assert (ex.size.value, ex.steps.value) == (24, 5), "the sliders start at the measurement's size and steps"
    assert "24 MiB" in ex.figures.value and "5 steps" in ex.figures.value
    assert any("image/png" in o.get("data", {}) for o in ex.chart.outputs)
    ex.button.click()
    assert calls == [(24 * 2**18, 5)] and ex.runs == 2
    # without results, the widget measures on display (the other side of the rule)
    MemoryExplorer(size_mib=8, steps=1, measure=counting)
    assert calls[-1] == (8 * 2**18, 1)


def test_real_measurement_small():
    widget = memory_explorer(size_mib=16, steps=2)
    figures = [c for c in widget.children if "explorer-figures" in classes(c)][0]
    assert "without donation" in figures.value and "with donation" in figures.value


def test_a_failed_measurement_is_reported_not_raised():
    def broken(n_elements, steps):
        raise RuntimeError("memory measurement failed (exit -9):")

    ex = MemoryExplorer(measure=broken)
    assert ex.runs == 0 and "Measurement failed" in ex.figures.value
