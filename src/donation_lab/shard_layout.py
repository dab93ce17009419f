"""Show where the pieces of a sharded array live, without extra packages.

`jax.debug.visualize_array_sharding` needs the `rich` package, which the
course does not install; these two helpers give the same picture for 1-D and
2-D arrays: a text table (works everywhere) and a matplotlib grid.
"""
import numpy as np


def _slice_bounds(index, shape):
    """(start, stop) per dimension for one shard's index tuple."""
    bounds = []
    for dim, sl in zip(shape, index, strict=True):
        start, stop, _ = sl.indices(dim)
        bounds.append((start, stop))
    return bounds


def shard_owners(array) -> np.ndarray:
    """An int grid, the array's shape (1-D shown as 1 row): which device id
    holds each element. Replicated elements show the lowest device id."""
    shape = tuple(array.shape)
    if len(shape) not in (1, 2):
        raise ValueError(f"shard_owners draws 1-D or 2-D arrays, not shape {shape}")
    grid = np.full(shape, -1, dtype=int)
    for shard in sorted(array.addressable_shards, key=lambda s: s.device.id, reverse=True):
        region = tuple(slice(a, b) for a, b in _slice_bounds(shard.index, shape))
        grid[region] = shard.device.id
    return grid.reshape(1, -1) if len(shape) == 1 else grid


def describe_shards(array) -> str:
    """One line per device: which slice of `array` it holds."""
    shape = tuple(array.shape)
    spec = array.sharding.spec if hasattr(array.sharding, "spec") else array.sharding
    lines = [f"{array.dtype}{list(shape)} with {spec}:"]
    for shard in sorted(array.addressable_shards, key=lambda s: s.device.id):
        parts = ", ".join(f"{a}:{b}" for a, b in _slice_bounds(shard.index, shape)) or "scalar"
        lines.append(f"  device {shard.device.id}: [{parts}]  ({shard.data.size} elements)")
    return "\n".join(lines)


def plot_shards(array, ax=None, title=None):
    """A coloured grid: one colour per device that holds an element."""
    import matplotlib.pyplot as plt

    grid = shard_owners(array)
    if ax is None:
        _, ax = plt.subplots(figsize=(min(12, 0.5 * grid.shape[1] + 1), 0.5 * grid.shape[0] + 1))
    ax.imshow(grid, cmap="tab10", vmin=0, vmax=9, aspect="auto")
    for (r, c), dev in np.ndenumerate(grid):
        ax.text(c, r, str(dev), ha="center", va="center", fontsize=8)
    ax.set_xticks([])
    ax.set_yticks([])
    from matplotlib.patches import Patch

    cmap = plt.get_cmap("tab10")
    devices = sorted(int(d) for d in np.unique(grid) if d >= 0)
    ax.legend(handles=[Patch(facecolor=cmap(d / 9), label=f"device {d}") for d in devices],
              title="holds the element", loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=7,
              title_fontsize=7, ncol=1 if len(devices) <= 4 else 2, frameon=False)
    ax.set_title(title or f"device id per element, spec {getattr(array.sharding, 'spec', '')}")
    return ax
