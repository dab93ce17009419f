"""Pictures where looking beats reading, drawn from real arrays and real
compiled programs (nothing is made up):

- `draw_buffers(ax, title, rows)`: the buffers a call used, one box per
  distinct buffer address, each labelled with the names that point to it and
  crossed out when deleted (lesson 1: before and after donation);
- `draw_peaks(results)`: the measured peak above the live arrays, one bar
  per loop, against one params array (lesson 1, from `compare_donation`);
- `draw_matching(fn, *args)`: the inputs on the left, each marked "(donation
  requested)" when it was asked for (an output need not take its buffer),
  the outputs on the right, and an arrow for every reuse the compiled
  program makes (its `input_output_alias`), coloured by whether the output
  has the input's shape and dtype or another shape or dtype of the same
  byte size (lesson 3). An arrow is where XLA put the buffer, which need not
  be the output JAX's second pass paired the input with (that pairing only
  decides the warning). It lowers and compiles `fn` only: nothing runs or
  is donated.

Every label lies inside its axes and every text inside its figure
(tests/test_figure_text.py).
"""
from __future__ import annotations

__all__ = ["buffer_rows", "draw_buffers", "draw_peaks", "matching_pairs", "draw_matching"]

PASS_COLOURS = {1: "tab:blue", 2: "tab:orange"}


def buffer_rows(**arrays) -> list:
    """(name, buffer address or None when deleted, deleted?) per JAX array."""
    rows = []
    for name, array in arrays.items():
        deleted = array.is_deleted()
        rows.append((name, None if deleted else array.unsafe_buffer_pointer(), deleted))
    return rows


def draw_buffers(ax, title: str, rows: list, addresses: dict | None = None):
    """One box per live buffer address (shared names in one box), deleted
    arrays as crossed-out boxes. `addresses` maps a deleted name to the address
    it had, so it is drawn in the box that now holds the output."""
    from matplotlib.patches import Rectangle

    addresses = addresses or {}
    boxes = {}  # address -> names
    for name, address, deleted in rows:
        key = address if address is not None else addresses.get(name, ("deleted", name))
        boxes.setdefault(key, []).append((name, deleted))
    width, step = 1.5, 1.7  # boxes wide, gaps narrow: room for "params (deleted)" (tests/test_figure_text.py)
    for i, names in enumerate(boxes.values()):
        x = i * step
        ax.add_patch(Rectangle((x, 0), width, 1, facecolor="#e8f0fe", edgecolor="black"))
        for j, (name, deleted) in enumerate(names):
            y = 0.7 - 0.3 * j
            ax.text(x + width / 2, y, name + (" (deleted)" if deleted else ""), ha="center", va="center",
                    fontsize=8, color="grey" if deleted else "black")
            if deleted:
                ax.plot([x + 0.1, x + width - 0.1], [y, y], color="tab:red", linewidth=1)
    ax.set_xlim(-0.1, max(1, len(boxes)) * step)
    ax.set_ylim(-0.1, 1.1)
    ax.set_axis_off()
    ax.set_title(f"{title}: {len(boxes)} buffer{'s' if len(boxes) != 1 else ''}", fontsize=9)
    return len(boxes)


def draw_peaks(results: dict, ax=None):
    """Bars of the peak memory above the live arrays, without and with
    donation ({False: LoopMeasurement, True: LoopMeasurement}), each with its
    value (a zero-height bar too), and a line at one params array."""
    import matplotlib.pyplot as plt

    mib = 2 ** 20
    if ax is None:
        _, ax = plt.subplots(figsize=(5, 2.5), layout="constrained")
    without, with_ = results[False], results[True]
    values = [without.extra_peak_bytes / mib, with_.extra_peak_bytes / mib]
    one_array = without.array_bytes / mib
    bars = ax.bar(["without donation", "with donation"], values, color=["tab:red", "tab:green"])
    ax.bar_label(bars, fmt="%.1f MiB", padding=2)
    ax.axhline(one_array, color="grey", linestyle=":", label="one params array")
    ax.set_ylim(0, 1.3 * max(*values, one_array))  # room above the tallest bar for its label
    ax.set_ylabel("peak MiB above live arrays")
    ax.set_title(without.measure, fontsize=10)
    ax.legend(loc="upper right", fontsize=8)
    return ax


def matching_pairs(fn, *args, **kwargs) -> dict:
    """What `draw_matching` draws: inputs (path, type, requested), outputs
    (path, type) and pairs (input index, output index, kind), one per reuse in
    the compiled program: kind 1 when the output has the input's shape and
    dtype, 2 when it has another shape or dtype (and so the same byte size,
    the only reuse XLA makes)."""
    import jax

    from .explain import explain_donation

    report = explain_donation(fn, *args, **kwargs)
    outs = [(("out" + jax.tree_util.keystr(p)), f"{s.dtype}[{','.join(map(str, s.shape))}]", s)
            for p, s in jax.tree_util.tree_flatten_with_path(fn.lower(*args, **kwargs).out_info)[0]]
    out_index = {name: i for i, (name, _, _) in enumerate(outs)}
    inputs, pairs = [], []
    for i, leaf in enumerate(report.leaves):
        inputs.append((leaf.path, leaf.type_str, leaf.requested))
        if leaf.reused and leaf.output in out_index:
            j = out_index[leaf.output]
            spec = outs[j][2]
            same = tuple(spec.shape) == tuple(leaf.shape) and str(spec.dtype) == leaf.dtype
            pairs.append((i, j, 1 if same else 2))
    return {"inputs": inputs, "outputs": [(n, t) for n, t, _ in outs], "pairs": pairs}


def draw_matching(fn, *args, ax=None, **kwargs):
    """Draw the reuses the compiled `fn` plans, input to output (explain_donation's plan); returns the pairs."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    m = matching_pairs(fn, *args, **kwargs)
    rows = max(len(m["inputs"]), len(m["outputs"]))
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 0.6 * rows + 1))  # wide enough for "(donation requested)"
    y = lambda k: rows - k  # noqa: E731  (top to bottom)
    for k, (path, type_str, requested) in enumerate(m["inputs"]):
        mark = "  (donation requested)" if requested else ""  # requested, not necessarily reused
        ax.text(0, y(k), f"{path}: {type_str}{mark}", ha="right", va="center",
                fontsize=9, bbox=dict(boxstyle="round", facecolor="#e8f0fe" if requested else "white"))
    for k, (path, type_str) in enumerate(m["outputs"]):
        ax.text(1, y(k), f"{path}: {type_str}", ha="left", va="center", fontsize=9,
                bbox=dict(boxstyle="round", facecolor="#eef7ee"))
    for i, j, n in m["pairs"]:
        ax.annotate("", xy=(0.98, y(j)), xytext=(0.02, y(i)),
                    arrowprops=dict(arrowstyle="->", color=PASS_COLOURS[n], linewidth=2))
    ax.legend(handles=[Line2D([], [], color=PASS_COLOURS[1], linewidth=2, label="reused: same shape and dtype"),
                       Line2D([], [], color=PASS_COLOURS[2], linewidth=2,
                              label="reused: other shape or dtype, same bytes")],
              loc="upper center", bbox_to_anchor=(0.5, 0), fontsize=8, ncol=2, frameon=False)
    ax.set_xlim(-2.0, 2.2)
    ax.set_ylim(0.3, rows + 0.7)
    ax.set_axis_off()
    ax.set_title("the compiled plan: inputs (left) reused by outputs (right)", fontsize=10)
    return m["pairs"]
