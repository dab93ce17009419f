"""The grading kernels' manager (grading/executors/kernel_manager.py): a kernel is started and killed as
jupyter_client does it, without its fixed pauses (it looks for a killed kernel's end every 5 ms instead of every
0.1 s, and does not sleep 0.01 s once a start or a shutdown is done); the workers' Execute preprocessor starts its
kernels with it."""
import asyncio

import jupyter_client.manager
from jupyter_client.manager import AsyncKernelManager

from donation_course.grading.executors.kernel_manager import ENDED_POLL, GradingKernelManager


def started_and_killed(manager_class, monkeypatch) -> tuple[list, list, bool, bool]:
    """Start a kernel with `manager_class`, kill it as a grading worker does (shutdown_kernel(now=True)); the
    sleeps jupyter_client's manager took in each, and whether the kernel was alive before and after the kill."""
    sleeps, real_sleep = [], asyncio.sleep

    async def recorded(seconds, *args, **kwargs):
        sleeps.append(seconds)
        return await real_sleep(seconds, *args, **kwargs)

    async def run():
        monkeypatch.setattr(jupyter_client.manager.asyncio, "sleep", recorded)
        km = manager_class(kernel_name="python3")
        await km.start_kernel()
        starting = list(sleeps)
        sleeps.clear()
        try:
            alive = await km.is_alive()
            await km.shutdown_kernel(now=True)
            return starting, list(sleeps), alive, await km.is_alive()
        finally:
            monkeypatch.undo()
            if km.has_kernel:
                await km.shutdown_kernel(now=True)

    return asyncio.run(run())


def test_the_grading_manager_waits_for_a_killed_kernel_without_jupyter_clients_pauses(monkeypatch):
    starting, killing, before, after = started_and_killed(GradingKernelManager, monkeypatch)
    assert before and not after  # waited for: the kernel is gone when the kill returns
    assert starting == []
    assert killing and set(killing) == {ENDED_POLL}, killing  # a launcher killed a moment ago is there at first


def test_jupyter_clients_manager_pauses_around_a_kernels_start_and_end(monkeypatch):
    """The other side: what GradingKernelManager leaves out, as jupyter_client 8.10.0 does it."""
    starting, killing, before, after = started_and_killed(AsyncKernelManager, monkeypatch)
    assert before and not after
    assert starting == [0.01]
    assert len(killing) >= 2 and set(killing[:-1]) == {0.1} and killing[-1] == 0.01, killing


def test_the_workers_execute_preprocessor_starts_its_kernels_with_the_grading_manager():
    from nbgrader.preprocessors import Execute

    from donation_course.grading.executors.fastkernel import GradingExecute

    assert GradingExecute().kernel_manager_class is GradingKernelManager
    assert Execute().kernel_manager_class is AsyncKernelManager  # nbgrader's own, which config cannot change
