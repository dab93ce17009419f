"""The MEMORY EXPLORER: pick an array size and a number of steps, run the
real loop with and without donation, and see the measured peaks.

    from donation_lab.explorer import memory_explorer
    memory_explorer()          # last expression of a cell: shows the widget
    memory_explorer(results=compare_donation(n, steps))  # starts from a measurement made

Every run measures for real (`donation_lab.memory.compare_donation`, two
fresh processes); nothing is simulated. Stable CSS classes, for browser
tests and styling:

- `donation-explorer`  the whole widget (a VBox)
- `explorer-size`      the size slider (MiB)
- `explorer-steps`     the steps slider
- `explorer-donate`    the highlight toggle: which of the two measured loops is drawn bold
                       (both loops are always measured and shown)
- `explorer-run`       the "Measure" button
- `explorer-figures`   the measured figures, as text (an HTML widget)
- `explorer-chart`     the chart (an Output widget holding a matplotlib figure)
"""
from __future__ import annotations

import html

from .memory import MiB, compare_donation, elements_for_mib

__all__ = ["memory_explorer", "MemoryExplorer", "chart_figure"]


class MemoryExplorer:
    """Builds the widget; `widget` is what a notebook displays."""

    def __init__(self, size_mib: int = 64, steps: int = 3, donate: bool = True,
                 measure_now: bool = True, measure=compare_donation, results: dict | None = None):
        import ipywidgets as w

        if results is not None:  # a measurement already made: start from it
            size_mib, steps = round(results[False].array_bytes / MiB), results[False].steps
        self._measure = measure
        self.results = None
        self.runs = 0
        self.size = w.IntSlider(value=size_mib, min=8, max=256, step=8,
                                description="Array size (MiB)", continuous_update=False,
                                style={"description_width": "initial"})
        self.steps = w.IntSlider(value=steps, min=1, max=10, description="Steps",
                                 continuous_update=False, style={"description_width": "initial"})
        self.donate = w.ToggleButton(value=donate, description=self._label(donate),
                                     tooltip="Both loops are always measured and shown; this picks which "
                                             "one is drawn bold (click to switch)",
                                     layout=w.Layout(width="auto"))
        self.button = w.Button(description="Measure", button_style="primary",
                               tooltip="Run the real loop, with and without donation")
        self.figures = w.HTML(value="<i>not measured yet</i>")
        self.chart = w.Output()
        for widget, css in [(self.size, "explorer-size"), (self.steps, "explorer-steps"),
                            (self.donate, "explorer-donate"), (self.button, "explorer-run"),
                            (self.figures, "explorer-figures"), (self.chart, "explorer-chart")]:
            widget.add_class(css)
        self.widget = w.VBox([
            w.HTML("<b>Memory explorer</b>: peak memory of <code>params = step(params, grads)</code>"),
            w.HBox([self.size, self.steps]),
            w.HBox([self.donate, self.button]),
            self.figures,
            self.chart,
        ])
        self.widget.add_class("donation-explorer")
        self.button.on_click(lambda _: self.run())
        # A new size or step count measures again; the toggle only redraws.
        self.size.observe(lambda _: self.run(), names="value")
        self.steps.observe(lambda _: self.run(), names="value")
        self.donate.observe(self._on_toggle, names="value")
        if results is not None:
            self.results, self.runs = results, 1
            self._show()
        elif measure_now:
            self.run()

    @staticmethod
    def _label(donate: bool) -> str:
        return f"Highlight: {'with' if donate else 'without'} donation"

    def _on_toggle(self, change):
        self.donate.description = self._label(change["new"])
        if self.results is not None:
            self._show()

    def run(self):
        """Measure for real at the chosen size and steps, then redraw."""
        self.figures.value = (f"<i>measuring {self.size.value} MiB x {self.steps.value} steps, "
                              "with and without donation...</i>")
        try:
            self.results = self._measure(elements_for_mib(self.size.value), self.steps.value)
        except Exception as err:  # e.g. out of memory in the measuring process
            self.figures.value = (f"<b>Measurement failed</b> at {self.size.value} MiB: "
                                  f"{html.escape(str(err).splitlines()[0] if str(err) else type(err).__name__)}. "
                                  "Try a smaller size.")
            return
        self.runs += 1
        self._show()

    def _show(self):
        without, with_ = self.results[False], self.results[True]
        chosen = with_ if self.donate.value else without
        bold = ' style="font-weight:bold"'
        rows = "".join(
            f"<tr{bold if m is chosen else ''}>"
            f"<td>{'with' if m.donate else 'without'} donation</td>"
            f"<td>{m.extra_peak_bytes / MiB:.1f} MiB</td><td>{m.extra_fraction:.0%}</td></tr>"
            for m in (without, with_))
        self.figures.value = (
            f"<div data-runs='{self.runs}'>Array: {without.array_bytes / MiB:.0f} MiB of float32, "
            f"{without.steps} steps. Measure: {html.escape(without.measure)}, above the live "
            f"params and grads.<table><tr><th>loop</th><th>extra peak per step</th>"
            f"<th>of one array</th></tr>{rows}</table></div>")
        self._draw(without, with_, chosen)

    def _draw(self, without, with_, chosen):
        # A bare Figure (no pyplot state) rendered to PNG and put into the
        # Output widget directly: works the same in a kernel and in tests.
        import io

        from IPython.display import Image

        png = io.BytesIO()
        chart_figure(without, with_, chosen).savefig(png, format="png", dpi=80)
        self.chart.outputs = ()
        self.chart.append_display_data(Image(data=png.getvalue(), format="png"))


def chart_figure(without, with_, chosen):
    """The explorer's chart: MiB above the live arrays per step, both loops,
    every point with its value, and a line at one params array."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.5, 2.8))
    ax = fig.subplots()
    steps = range(1, without.steps + 1)
    one_array = without.array_bytes / MiB
    top = one_array
    for m, colour in ((without, "tab:red"), (with_, "tab:green")):
        values = [b / MiB for b in m.extra_per_step]
        top = max(top, *values)
        ax.plot(steps, values, marker="o", color=colour, linewidth=3 if m is chosen else 1,
                label=f"{'with' if m.donate else 'without'} donation")
        for step, value in zip(steps, values, strict=True):  # every point carries its value, zero included
            ax.annotate(f"{value:.1f}", (step, value), textcoords="offset points", xytext=(0, 5),
                        ha="center", fontsize=7, color=colour, fontweight="bold" if m is chosen else "normal")
    ax.axhline(one_array, color="grey", linestyle=":", label="one params array")
    ax.set_xlabel("step")
    ax.set_ylabel("MiB above live arrays")
    ax.set_title(f"Peak extra memory per step ({without.measure})", fontsize=10)
    ax.set_xticks(list(steps))
    ax.set_xlim(0.5, without.steps + 0.5)  # room beside the first and last values
    ax.set_ylim(-0.08 * top, 1.35 * top)  # room above the highest value for its label
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False)  # beside: no value under it
    fig.tight_layout()
    return fig


def memory_explorer(size_mib: int = 64, steps: int = 3, donate: bool = True, results: dict | None = None):
    """The memory explorer widget, measured once on display; or, given
    `results` (what `compare_donation` returned), showing that measurement
    at its size and steps until a slider or the button asks for another."""
    return MemoryExplorer(size_mib=size_mib, steps=steps, donate=donate, results=results).widget
