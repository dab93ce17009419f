"""Explain what a jitted function's compiled program plans for each argument it may donate.

`explain_donation(fn, *args, **kwargs)` lowers and compiles `fn` for these
arguments (it never runs it, so nothing is donated or deleted) and reports,
for every array leaf of every argument:

- whether donation was *requested* (`lowered.args_info[...].donated`),
- whether the compiled program *plans* to reuse the buffer for an output
  (read from the compiled HLO's `input_output_alias`), and for which output,
- how many bytes that plan reuses per call: on each device, the bytes of the
  piece that device holds (the whole array when it is replicated), and
- the warnings JAX raised while lowering and compiling.

The report is the compiled program's plan, not what a call does. A call can
decline the planned reuse without a warning and write the output into a new
buffer: on the CPU, while a NumPy view of the array is alive (the array is
then not deleted), or when the array's memory belongs to NumPy (what
`jax.device_put` makes of a C-contiguous NumPy array in a dtype JAX keeps,
whose data starts at a multiple of 64 bytes: the array is deleted all the
same). An argument the call must first copy to the program's devices or
layout usually hands the program only copies, and the caller's array is not
deleted. The exception is a program that replicates the argument over
devices that include the one the array is on: that device's copy is the
array's own buffer, which is donated, and the array is deleted.

JAX warns about unusable donations when it lowers `fn` for a signature (a
call or `.lower()`), once: if `fn` was already lowered for these argument
types, the warning is not raised again, so `unusable` is computed from the
compiled aliasing and does not depend on the warning. The other way round
holds too: after `explain_donation(fn, ...)`, a real call of `fn` with the
same argument types does not warn, because JAX already did (the report's
`warnings` field has the message).
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



def input_shardings(compiled, n_leaves: int) -> list | None:
    """The compiled program's sharding of each argument leaf, from the public
    `compiled.input_shardings`, with None for a leaf jit dropped (jax
    0.12); None when that is not available for every leaf."""
    import jax

    try:
        shardings = jax.tree_util.tree_flatten(compiled.input_shardings, is_leaf=lambda x: x is None)[0]
    except Exception:
        return None
    return shardings if len(shardings) == n_leaves else None


def kept_leaves(compiled, n_leaves: int) -> list:
    """Indices of the argument leaves the compiled program kept. jit drops
    arguments the function never uses (keep_unused=False), and HLO parameter
    k is the k-th kept leaf. Read from `input_shardings`, None for a dropped
    leaf; when that is not available, every leaf counts as kept."""
    return _kept(input_shardings(compiled, n_leaves), n_leaves)


def _kept(shardings: list | None, n_leaves: int) -> list:
    if shardings is None:
        return list(range(n_leaves))
    return [index for index, sharding in enumerate(shardings) if sharding is not None]


def _bytes_per_device(sharding, shape: tuple, itemsize: int) -> tuple:
    """((device id, bytes of the piece that device holds), ...) in device id
    order: a split array gives each device its piece, a replicated one the
    whole array. ((None, whole size),) when the sharding is unknown."""
    whole = int(math.prod(shape)) * itemsize
    if sharding is None:
        return ((None, whole),)
    try:
        pieces = sharding.devices_indices_map(tuple(shape))
    except Exception:
        return ((None, whole),)
    return tuple(sorted(
        (device.id, itemsize * int(math.prod(len(range(*s.indices(n))) for s, n in zip(index, shape, strict=True))))
        for device, index in pieces.items()))


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
    requested: bool        # donation in effect for this lowering: lowered.args_info's `donated` (False for
                           # every leaf when jit traces the signature under jax.debug_nans)
    reused: bool           # the compiled program plans to write an output into this buffer
    pruned: bool           # the function never uses it, so jit dropped it
    output: str | None     # which output is planned to reuse it, e.g. "out[0]"
    # (device id, bytes of the piece that device holds), one per device of the
    # program; ((None, nbytes),) when the compiled program's shardings are
    # unknown, () for a pruned leaf
    bytes_per_device: tuple = ()

    @property
    def type_str(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.shape))}]"

    @property
    def status(self) -> str:
        if not self.requested:
            return "not donated"
        if self.reused:
            return f"reuse its buffer for {self.output}" if self.output else "reuse its buffer"
        if self.pruned:
            return "unused argument: pruned, not donated"
        return "NOT usable: no output takes its buffer"  # none that fits, or one of another byte size

    @property
    def bytes_saved(self) -> int:
        """Bytes the compiled program plans to reuse per call, summed over its devices."""
        return sum(nbytes for _, nbytes in self.bytes_per_device) if self.reused else 0


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
        """Bytes the compiled program plans to reuse per call, summed over its devices."""
        return sum(leaf.bytes_saved for leaf in self.leaves)

    @property
    def bytes_saved_per_device(self) -> dict:
        """Device id -> bytes the compiled program plans to reuse there per call
        (what `compiled.memory_analysis().alias_size_in_bytes` counts). Every
        device of the program is a key, with 0 where nothing is reused."""
        per_device = {}
        for leaf in self.leaves:
            for device, nbytes in leaf.bytes_per_device:
                per_device[device] = per_device.get(device, 0) + (nbytes if leaf.reused else 0)
        return per_device

    def leaf(self, path: str) -> LeafDonation:
        for leaf in self.leaves:
            if leaf.path == path:
                return leaf
        raise KeyError(f"no argument leaf {path!r}; leaves are {[leaf.path for leaf in self.leaves]}")

    def summary(self) -> str:
        per_device = self.bytes_saved_per_device
        amounts = set(per_device.values())
        if len(per_device) <= 1 or self.bytes_saved == 0:
            size = f"{_human(self.bytes_saved)} per call"
        elif len(amounts) == 1:
            size = (f"{_human(amounts.pop())} per call on each of {len(per_device)} devices "
                    f"({_human(self.bytes_saved)} in all)")
        else:
            size = (f"{_human(self.bytes_saved)} per call over {len(per_device)} devices "
                    f"({_human(min(amounts))} to {_human(max(amounts))} per device)")
        # Every leaf asked to donate is counted once: planned for reuse, not
        # usable, or pruned (unused, so jit dropped it: not donated at all).
        asked = len(self.requested)
        if not asked:
            parts = ["nothing is asked to donate"]
        else:
            buffers = "buffer" if asked == 1 else "buffers"
            parts = [f"the program plans to reuse {len(self.reused)} of {asked} {buffers} asked to donate, {size}"]
        if self.unusable:
            parts.append("not usable: " + ", ".join(leaf.path for leaf in self.unusable))
        pruned = [leaf for leaf in self.requested if leaf.pruned]
        if pruned:
            parts.append("unused, pruned, not donated: " + ", ".join(leaf.path for leaf in pruned))
        return "; ".join(parts)

    def __str__(self) -> str:
        rows = [("argument", "type", "bytes", "donate?", "what the compiled program plans")]
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
                       ("argument", "type", "bytes", "donate?", "what the compiled program plans"))
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


def _static_positions(fn, n_positional: int) -> set | None:
    """The positions among `n_positional` positional arguments that jit takes
    as static (and leaves out of `lowered.args_info`), as JAX resolves them:
    its static_argnums, which jit completes from static_argnames through the
    signature, a negative number counting from the end. None when `fn` does
    not say (jax 0.12 keeps them in `fn._jit_info`)."""
    numbers = getattr(getattr(fn, "_jit_info", None), "static_argnums", None)
    if numbers is None:
        return None
    return {i % n_positional if i < 0 else i for i in numbers if -n_positional <= i < n_positional}


def _param_names(fn, n_positional: int, n_lowered: int) -> list:
    """Names of the `n_lowered` positional arguments jit lowered (the non-static
    ones, in order) out of the `n_positional` the call passed."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    static = _static_positions(fn, n_positional)
    if static is None:
        static = set() if n_lowered == n_positional else None
    lowered = (None if static is None else
               [names[i] if i < len(names) else f"args[{i}]" for i in range(n_positional) if i not in static])
    if lowered is None or len(lowered) != n_lowered:
        # which positions are static is unknown: say only what is known
        return [f"non-static argument {k}" for k in range(n_lowered)]
    return lowered


def _leaf_path(path, positional_names) -> str:
    import jax

    # path[0] is the (args, kwargs) split; path[1] the position or keyword.
    which, head, rest = path[0].idx, path[1], path[2:]
    name = positional_names[head.idx] if which == 0 else str(head.key)
    return name + jax.tree_util.keystr(tuple(rest))


def explain_donation(fn, *args, **kwargs) -> DonationReport:
    """Lower and compile the jitted `fn` for these arguments and report, per
    argument leaf, whether donation was requested and whether the compiled
    program plans to reuse the buffer (a call can still decline the reuse:
    see the module's docstring). Does not call `fn`: no array is donated."""
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
    found = input_shardings(compiled, n_leaves)
    kept = _kept(found, n_leaves)
    shardings = found or [None] * n_leaves
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

    # args_info leaves out static arguments: name the lowered positional
    # arguments after the non-static parameters, as JAX pairs them.
    names = _param_names(fn, len(args), len(lowered.args_info[0]))
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
            bytes_per_device=(() if index not in kept else   # the program never receives a pruned leaf
                              _bytes_per_device(shardings[index], shape, dtype.itemsize)),
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
