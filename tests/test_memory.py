"""The memory measurement behind lesson 01 and the explorer."""
import jax.numpy as jnp

from donation_lab import memory
from donation_lab.memory import (
    DEVICE_MEASURE,
    RSS_MEASURE,
    DeviceMeter,
    RssMeter,
    compare_donation,
    elements_for_mib,
    pick_meter,
    run_loop_here,
)


def test_donation_removes_the_extra_copy():
    """What lesson 1 and the explorer say: without donation every step needs
    one whole second copy of params (95% to 105% of one array, at every step:
    no allocator caching counted), with donation at most 2% of it."""
    results = compare_donation(elements_for_mib(64), steps=3)
    without, with_ = results[False], results[True]
    assert without.measure == with_.measure == RSS_MEASURE
    assert without.array_bytes == with_.array_bytes == 64 * 2 ** 20
    assert all(0.95 <= b / without.array_bytes <= 1.05 for b in without.extra_per_step), without.extra_per_step
    assert with_.extra_fraction <= 0.02, with_.describe()
    assert len(without.extra_per_step) == 3
    assert "without donation" in without.describe() and "with donation" in with_.describe()


def test_rss_helpers():
    assert memory.peak_rss_bytes() >= memory.current_rss_bytes() > 0
    assert memory.reset_peak_rss() is True  # /proc/self/clear_refs works on this Linux
    assert isinstance(pick_meter(), RssMeter)  # CPU: memory_stats() is None


class FakeGpu:
    """Stands in for a GPU device: its allocator counts the bytes in use."""

    def __init__(self):
        self.in_use = 1000
        self.peak = 1000

    def memory_stats(self):
        return {"bytes_in_use": self.in_use, "peak_bytes_in_use": self.peak}


def test_gpu_branch_uses_device_counters():
    gpu = FakeGpu()
    meter = pick_meter(gpu)
    assert isinstance(meter, DeviceMeter) and meter.measure == DEVICE_MEASURE
    gpu.in_use, gpu.peak = 5000, 9000
    assert meter.current() == 5000 and meter.peak() == 9000


def test_loop_with_a_fake_gpu_meter_reports_its_numbers():
    class Meter(DeviceMeter):
        # live arrays take 800 bytes; each step peaks 400 above them
        calls = 0

        def current(self):
            Meter.calls += 1
            return 1000 if Meter.calls == 1 else 1800

        def peak(self):
            return 2200

    m = run_loop_here(100, 2, donate=False, meter=Meter(FakeGpu()))
    assert m.measure == DEVICE_MEASURE and m.live_bytes == 800
    assert m.extra_per_step == [400, 400] and m.array_bytes == 400 and m.extra_fraction == 1.0


def test_elements_for_mib():
    assert elements_for_mib(1) == 2 ** 18
    assert jnp.zeros(elements_for_mib(1), jnp.float32).nbytes == 2 ** 20


def test_large_arrays_are_measured_one_process_at_a_time(monkeypatch):
    calls = []
    monkeypatch.setattr(memory, "measure_loop",
                        lambda n, steps, donate, timeout=120: calls.append(donate) or donate)
    assert compare_donation(elements_for_mib(256), steps=1) == {False: False, True: True}
    assert calls == [False, True]
