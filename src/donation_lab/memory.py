"""Measure what donation saves: the peak memory a training-style loop needs.

`measure_loop(n_elements, steps, donate)` runs `params = step(params, grads)`
for real and reports how far memory rose above what the live arrays
(`params` and `grads`) need. Without donation each step needs room for a
second `params` (the fresh output, while the input is still alive); with
donation the output is written into the input's buffer.

Each measurement runs in a fresh Python process: allocators keep freed
buffers for reuse, so a second measurement in the same process would see
memory that is already there and under-report. What is measured depends on
the backend, and the result says which (`measure`):

- CPU: the process's peak resident memory (Linux `VmHWM`, reset before the
  loop by writing "5" to `/proc/self/clear_refs`).
- GPU/TPU: the device allocator's `peak_bytes_in_use` from
  `device.memory_stats()`.

So that the numbers count arrays and not an allocator's caching, the
measuring process has glibc map every buffer of 1 MiB or more on its own and
unmap it when freed (`MALLOC_MMAP_THRESHOLD_`), and before each step the loop
waits (at most a second) until memory is back to the live arrays: the
previous step's old `params` is handed back in the background, and would
otherwise be counted in the next step's peak. Without these, a step shows 100%
to 200% of one array on CPU, depending on the size and on timing; with them,
each step shows what it needs: one array without donation, nothing with it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field

MiB = 2 ** 20
RSS_MEASURE = "process peak RSS (CPU)"
DEVICE_MEASURE = "device peak_bytes_in_use (GPU)"

__all__ = ["LoopMeasurement", "measure_loop", "compare_donation", "peak_rss_bytes",
           "current_rss_bytes", "reset_peak_rss", "pick_meter", "elements_for_mib", "settle"]


def _status_bytes(key: str) -> int | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def peak_rss_bytes() -> int:
    """This process's peak resident memory since start (or the last reset)."""
    peak = _status_bytes("VmHWM")
    if peak is None:  # not Linux: ru_maxrss is KiB on Linux, bytes on macOS
        import resource
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        peak = rss if sys.platform == "darwin" else rss * 1024
    return peak


def current_rss_bytes() -> int:
    rss = _status_bytes("VmRSS")
    return rss if rss is not None else peak_rss_bytes()


def reset_peak_rss() -> bool:
    """Reset the peak (VmHWM) to the current RSS; False where not supported."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class RssMeter:
    measure = RSS_MEASURE

    def __init__(self):
        reset_peak_rss()

    def current(self) -> int:
        return current_rss_bytes()

    def peak(self) -> int:
        return peak_rss_bytes()

    def reset(self) -> None:
        reset_peak_rss()


class DeviceMeter:
    """The device allocator's own counters (GPU/TPU). Its peak cannot be
    reset, which is one more reason each measurement gets a fresh process."""
    measure = DEVICE_MEASURE

    def __init__(self, device):
        self.device = device

    def current(self) -> int:
        return int(self.device.memory_stats()["bytes_in_use"])

    def peak(self) -> int:
        return int(self.device.memory_stats()["peak_bytes_in_use"])

    def reset(self) -> None:
        pass


def pick_meter(device=None):
    """DeviceMeter where the device reports memory statistics, else RssMeter
    (the CPU backend's `memory_stats()` returns None)."""
    if device is None:
        import jax
        device = jax.devices()[0]
    stats = device.memory_stats()
    if stats and "peak_bytes_in_use" in stats:
        return DeviceMeter(device)
    return RssMeter()


@dataclass
class LoopMeasurement:
    n_elements: int
    steps: int
    donate: bool
    array_bytes: int              # one params array
    live_bytes: int               # memory the live arrays took when created
    extra_per_step: list = field(default_factory=list)  # peak above live, after each step
    measure: str = RSS_MEASURE
    backend: str = "cpu"

    @property
    def extra_peak_bytes(self) -> int:
        """The most memory above the live arrays that any step needed."""
        return max(self.extra_per_step) if self.extra_per_step else 0

    @property
    def extra_fraction(self) -> float:
        """extra_peak_bytes as a fraction of one params array (1.0 = a full copy)."""
        return self.extra_peak_bytes / self.array_bytes if self.array_bytes else 0.0

    def describe(self) -> str:
        mode = "with donation" if self.donate else "without donation"
        return (f"{mode}: {self.extra_peak_bytes / MiB:.1f} MiB above the live arrays at peak "
                f"({self.extra_fraction:.0%} of one {self.array_bytes / MiB:.0f} MiB array; "
                f"{self.steps} steps; {self.measure})")


def elements_for_mib(mib: float) -> int:
    """Number of float32 elements in `mib` MiB."""
    return int(mib * MiB) // 4


def run_loop_here(n_elements: int, steps: int, donate: bool, meter=None) -> LoopMeasurement:
    """The loop itself, in this process. Compiles first (ahead of time, from
    shapes only) so compilation is not counted; then creates the arrays,
    takes the baseline, and runs `steps` real steps, blocking on each."""
    import jax
    import jax.numpy as jnp

    meter = meter or pick_meter()

    def sgd_step(params, grads):
        return params - 0.01 * grads

    step = jax.jit(sgd_step, donate_argnums=(0,) if donate else ())
    spec = jax.ShapeDtypeStruct((n_elements,), jnp.float32)
    compiled = step.lower(spec, spec).compile()

    before = meter.current()
    params = jnp.ones((n_elements,), jnp.float32).block_until_ready()
    grads = jnp.full((n_elements,), 0.5, jnp.float32).block_until_ready()
    live = meter.current()
    extra = []
    for _ in range(steps):
        settle(meter, live)
        meter.reset()
        params = compiled(params, grads)
        params.block_until_ready()
        extra.append(max(0, meter.peak() - live))
    array_bytes = n_elements * 4
    return LoopMeasurement(n_elements=n_elements, steps=steps, donate=donate,
                           array_bytes=array_bytes, live_bytes=max(0, live - before),
                           extra_per_step=extra, measure=meter.measure,
                           backend=jax.default_backend())


def settle(meter, live: int, slack: int = MiB // 4, timeout: float = 1.0) -> None:
    """Wait until the memory in use is back to `live` (within `slack`), or
    `timeout` seconds have passed: a buffer freed by the last step (the old
    `params` of a loop without donation) is released in the background."""
    deadline = time.monotonic() + timeout
    while meter.current() > live + slack and time.monotonic() < deadline:
        time.sleep(0.001)


def _child_command(n_elements: int, steps: int, donate: bool) -> list:
    code = ("import json, sys; from dataclasses import asdict; "
            "from donation_lab.memory import run_loop_here; "
            f"m = run_loop_here({int(n_elements)}, {int(steps)}, {bool(donate)}); "
            "print('RESULT ' + json.dumps(asdict(m)))")
    return [sys.executable, "-c", code]


def _child_env() -> dict:
    env = dict(os.environ)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the src/ folder
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    # glibc: buffers of 1 MiB or more are mapped on their own and unmapped when
    # freed, so the resident size follows the arrays (see the module's docstring).
    env["MALLOC_MMAP_THRESHOLD_"] = env["MALLOC_TRIM_THRESHOLD_"] = str(MiB)
    return env


def _parse(proc_out: str, proc_err: str, returncode: int) -> LoopMeasurement:
    for line in proc_out.splitlines():
        if line.startswith("RESULT "):
            return LoopMeasurement(**json.loads(line[len("RESULT "):]))
    raise RuntimeError(f"memory measurement failed (exit {returncode}):\n{proc_err[-2000:]}")


IN_PROCESS_ENV = "DONATION_LAB_NO_PROCESSES"  # set in grading kernels, which start no process


def measure_loop(n_elements: int, steps: int = 3, donate: bool = True,
                 timeout: float = 120) -> LoopMeasurement:
    """Run the loop in a fresh Python process and return what it measured
    (in this process where IN_PROCESS_ENV is set: a grading kernel)."""
    if os.environ.get(IN_PROCESS_ENV):
        return run_loop_here(n_elements, steps, donate)
    proc = subprocess.run(_child_command(n_elements, steps, donate), capture_output=True,
                          text=True, env=_child_env(), timeout=timeout)
    return _parse(proc.stdout, proc.stderr, proc.returncode)


PARALLEL_UP_TO_BYTES = 128 * MiB


def compare_donation(n_elements: int, steps: int = 3, timeout: float = 120) -> dict:
    """Measure the loop without and with donation, each in a fresh process.
    Small arrays run both processes side by side (quicker); above 128 MiB they
    run one after the other, so that a small machine (Binder: about 2 GiB)
    never holds both. Returns {False: LoopMeasurement, True: LoopMeasurement}."""
    if n_elements * 4 > PARALLEL_UP_TO_BYTES or os.environ.get(IN_PROCESS_ENV):
        return {donate: measure_loop(n_elements, steps, donate, timeout) for donate in (False, True)}
    procs = {donate: subprocess.Popen(_child_command(n_elements, steps, donate),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env=_child_env())
             for donate in (False, True)}
    results = {}
    for donate, proc in procs.items():
        out, err = proc.communicate(timeout=timeout)
        results[donate] = _parse(out, err, proc.returncode)
    return results


if __name__ == "__main__":  # python -m donation_lab.memory [MiB] [steps]
    mib = float(sys.argv[1]) if len(sys.argv) > 1 else 128
    n_steps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    for m in compare_donation(elements_for_mib(mib), n_steps).values():
        print(m.describe())
        print(json.dumps(asdict(m)))
