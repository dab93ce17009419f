"""Explain what a jitted function will do with each argument it may donate.

`explain_donation(fn, *args, **kwargs)` lowers and compiles `fn` for these
arguments (it never runs it, so nothing is donated or deleted) and reports,
for every array leaf of every argument:

- whether donation was *requested* (`lowered.args_info[...].donated`),
- whether the compiled program really *reuses* the buffer for an output
  (read from the compiled HLO's `input_output_alias`, which is what XLA
  acts on), and for which output,
- how many bytes that saves, and
- the warnings JAX raised while lowering and compiling.

JAX warns about unusable donations once per compilation: if `fn` was already
lowered for these shapes, the warning is not raised again, so `unusable`
is computed from the compiled aliasing and does not depend on the warning.
The other way round holds too: after `explain_donation(fn, ...)`, a real call
of `fn` with the same shapes does not warn, because JAX already did (the
report's `warnings` field has the message).
"""
from __future__ import annotations

import html
import inspect
import math
import re
import warnings
from dataclasses import dataclass, field

import numpy as np

__all__ = ["explain_donation", "DonationReport", "LeafDonation", "parse_input_output_alias"]

_ALIAS_ENTRY = re.compile(r"\{([\d,\s]*)\}:\s*\((\d+),\s*\{[\d,\s]*\},\s*([\w-]+)\)")



def kept_leaves(compiled, n_leaves: int) -> list:
    """Indices of the argument leaves the compiled program kept. jit drops
    arguments the function never uses (keep_unused=False), and HLO parameter
    k is the k-th kept leaf. Read from the public `compiled.input_shardings`,
    which holds None for a dropped leaf (jax 0.10.2); when that is not
    available, every leaf counts as kept."""
    import jax

    try:
        shardings = jax.tree_util.tree_flatten(compiled.input_shardings, is_leaf=lambda x: x is None)[0]
    except Exception:
        shardings = None
    if shardings is None or len(shardings) != n_leaves:
        return list(range(n_leaves))
    return [index for index, sharding in enumerate(shardings) if sharding is not None]

def parse_input_output_alias(hlo_text: str) -> dict:
    """Map HLO output index (tuple of ints, () for a lone output) to the HLO
    parameter number whose buffer it reuses, from a compiled module's text."""
    header = hlo_text.split("\n", 1)[0]
    start = header.find("input_output_alias={")
    if start < 0:
        return {}
    # The value nests braces ({ {0}: (0, {}, may-alias) }): take it balanced.
    i = start + len("input_output_alias=")
    depth = 0
    for j in range(i, len(header)):
        depth += {"{": 1, "}": -1}.get(header[j], 0)
        if depth == 0:
            break
    aliases = {}
    for out_index, param, _kind in _ALIAS_ENTRY.findall(header[i + 1:j]):
        key = tuple(int(i) for i in out_index.replace(" ", "").split(",") if i)
        aliases[key] = int(param)
    return aliases


@dataclass(frozen=True)
class LeafDonation:
    """One array leaf of the arguments, as the compiled function treats it."""
    path: str              # readable pytree path, e.g. "state['w']"
    shape: tuple
    dtype: str
    nbytes: int
    requested: bool        # donation asked for (donate_argnums / donate_argnames)
    reused: bool           # the compiled program writes an output into this buffer
    pruned: bool           # the function never uses it, so jit dropped it
    output: str | None     # which output reuses it, e.g. "out[0]"

    @property
    def type_str(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.shape))}]"

    @property
    def status(self) -> str:
        if not self.requested:
            return "not donated"
        if self.reused:
            return f"reused by {self.output}" if self.output else "reused"
        if self.pruned:
            return "unused argument: pruned, not donated"
        return "NOT usable: no output took its buffer"  # none that fits, or one of another byte size

    @property
    def bytes_saved(self) -> int:
        return self.nbytes if self.reused else 0


@dataclass
class DonationReport:
    """What `explain_donation` found; renders as a table in a notebook."""
    function: str
    leaves: list
    warnings: list = field(default_factory=list)   # messages JAX raised now
    alias_size_in_bytes: int | None = None         # from compiled.memory_analysis()

    @property
    def requested(self) -> list:
        return [leaf for leaf in self.leaves if leaf.requested]

    @property
    def reused(self) -> list:
        return [leaf for leaf in self.leaves if leaf.reused]

    @property
    def unusable(self) -> list:
        """Donations that were asked for but give nothing (and keep the input alive)."""
        return [leaf for leaf in self.leaves if leaf.requested and not leaf.reused and not leaf.pruned]

    @property
    def bytes_saved(self) -> int:
        return sum(leaf.bytes_saved for leaf in self.leaves)

    def leaf(self, path: str) -> LeafDonation:
        for leaf in self.leaves:
            if leaf.path == path:
                return leaf
        raise KeyError(f"no argument leaf {path!r}; leaves are {[leaf.path for leaf in self.leaves]}")

    def summary(self) -> str:
        parts = [f"{len(self.reused)} of {len(self.requested)} donated leaves reused, "
                 f"{_human(self.bytes_saved)} saved per call"]
        if self.unusable:
            parts.append("not usable: " + ", ".join(leaf.path for leaf in self.unusable))
        return "; ".join(parts)

    def __str__(self) -> str:
        rows = [("argument", "type", "bytes", "donate?", "what the compiled function does")]
        for leaf in self.leaves:
            rows.append((leaf.path, leaf.type_str, _human(leaf.nbytes),
                         "yes" if leaf.requested else "no", leaf.status))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = [f"Donation in {self.function}: {self.summary()}"]
        for i, row in enumerate(rows):
            lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
            if i == 0:
                lines.append("  ".join("-" * w for w in widths))
        for message in self.warnings:
            lines.append("warning: " + message.splitlines()[0])
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        esc = html.escape
        head = "".join(f"<th>{h}</th>" for h in
                       ("argument", "type", "bytes", "donate?", "what the compiled function does"))
        body = []
        for leaf in self.leaves:
            colour = ("#e6f4ea" if leaf.reused else
                      "#fdecea" if leaf in self.unusable else "")
            style = f' style="background:{colour}"' if colour else ""
            body.append(
                f"<tr{style}><td><code>{esc(leaf.path)}</code></td><td><code>{esc(leaf.type_str)}</code></td>"
                f"<td>{_human(leaf.nbytes)}</td><td>{'yes' if leaf.requested else 'no'}</td>"
                f"<td>{esc(leaf.status)}</td></tr>")
        warn = "".join(f"<p><b>warning:</b> {esc(m.splitlines()[0])}</p>" for m in self.warnings)
        return (f'<div class="donation-report"><p><b>Donation in <code>{esc(self.function)}</code>:</b> '
                f"{esc(self.summary())}</p><table><thead><tr>{head}</tr></thead>"
                f"<tbody>{''.join(body)}</tbody></table>{warn}</div>")


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _param_names(fn, n_positional: int) -> list:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return [names[i] if i < len(names) else f"args[{i}]" for i in range(n_positional)]


def _leaf_path(path, positional_names) -> str:
    import jax

    # path[0] is the (args, kwargs) split; path[1] the position or keyword.
    which, head, rest = path[0].idx, path[1], path[2:]
    name = positional_names[head.idx] if which == 0 else str(head.key)
    return name + jax.tree_util.keystr(tuple(rest))


def explain_donation(fn, *args, **kwargs) -> DonationReport:
    """Lower and compile the jitted `fn` for these arguments and report, per
    argument leaf, whether donation was requested and whether the compiled
    program really reuses the buffer. Does not call `fn`: no array is donated."""
    import jax

    if not hasattr(fn, "lower"):
        raise TypeError("explain_donation needs a jitted function (made with jax.jit), "
                        f"got {type(fn).__name__}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lowered = fn.lower(*args, **kwargs)
        compiled = lowered.compile()
    messages = [str(w.message) for w in caught]

    info_leaves = jax.tree_util.tree_flatten_with_path(
        lowered.args_info, is_leaf=lambda x: hasattr(x, "donated"))[0]
    n_leaves = len(info_leaves)

    # jit drops arguments the function never uses (keep_unused=False); HLO
    # parameter k is the k-th kept leaf.
    kept = kept_leaves(compiled, n_leaves)
    param_to_leaf = dict(enumerate(kept))

    try:
        out_paths = [jax.tree_util.keystr(p) for p, _ in
                     jax.tree_util.tree_flatten_with_path(lowered.out_info)[0]]
    except Exception:  # out_info is a convenience; aliasing does not depend on it
        out_paths = []

    aliased_by = {}
    for out_index, param in parse_input_output_alias(compiled.as_text()).items():
        leaf_index = param_to_leaf.get(param)
        if leaf_index is None:
            continue
        flat_out = out_index[0] if out_index else 0
        if out_paths and len(out_index) <= 1 and flat_out < len(out_paths):
            aliased_by[leaf_index] = "out" + out_paths[flat_out]
        else:
            aliased_by[leaf_index] = f"output {out_index}"

    n_positional = len(args)
    names = _param_names(fn, n_positional)
    leaves = []
    for index, (path, info) in enumerate(info_leaves):
        shape = tuple(info.shape)      # public ArgInfo.shape / .dtype
        dtype = np.dtype(info.dtype)
        leaves.append(LeafDonation(
            path=_leaf_path(path, names),
            shape=shape,
            dtype=str(info.dtype),
            nbytes=int(math.prod(shape)) * dtype.itemsize,
            requested=bool(info.donated),
            reused=index in aliased_by,
            pruned=index not in kept,
            output=aliased_by.get(index),
        ))

    alias_bytes = None
    try:
        stats = compiled.memory_analysis()
        alias_bytes = None if stats is None else int(stats.alias_size_in_bytes)
    except Exception:  # not every backend reports memory statistics
        pass
    name = getattr(fn, "__name__", None) or getattr(getattr(fn, "__wrapped__", None), "__name__", "fn")
    return DonationReport(function=name, leaves=leaves, warnings=messages,
                          alias_size_in_bytes=alias_bytes)
