"""The grading kernels' manager (grading/executors/kernel_manager.py): a killed kernel is waited for until its
launcher is gone, as jupyter_client waits, looking every 5 ms instead of every 0.1 s; the workers' Execute
preprocessor starts its kernels with it."""
import asyncio

import jupyter_client.manager
import pytest
from jupyter_client.manager import AsyncKernelManager

from donation_course.grading.executors.kernel_manager import ENDED_POLL, GradingKernelManager


def killed(manager_class, monkeypatch) -> tuple[list, bool, bool]:
    """Start a kernel with `manager_class`, kill it as a grading worker does (shutdown_kernel(now=True)); the
    sleeps jupyter_client's manager took meanwhile, and whether the kernel was alive before and after."""
    sleeps, real_sleep = [], asyncio.sleep

    async def recorded(seconds, *args, **kwargs):
        sleeps.append(seconds)
        return await real_sleep(seconds, *args, **kwargs)

    async def run():
        km = manager_class(kernel_name="python3")
        await km.start_kernel()
        try:
            alive = await km.is_alive()
            monkeypatch.setattr(jupyter_client.manager.asyncio, "sleep", recorded)
            await km.shutdown_kernel(now=True)
            monkeypatch.undo()
            return alive, await km.is_alive()
        finally:
            if km.has_kernel:
                await km.shutdown_kernel(now=True)

    before, after = asyncio.run(run())
    return sleeps, before, after


@pytest.mark.parametrize("manager_class, interval", [(GradingKernelManager, ENDED_POLL), (AsyncKernelManager, 0.1)])
def test_a_killed_kernel_is_waited_for_until_it_is_gone(manager_class, interval, monkeypatch):
    sleeps, before, after = killed(manager_class, monkeypatch)
    assert before and not after  # waited for: the kernel is gone when the kill returns
    # a launcher killed a moment ago is there at the first look; the last sleep is jupyter_client's own 0.01 s
    # after every start and shutdown (in_pending_state)
    assert len(sleeps) >= 2 and set(sleeps[:-1]) == {interval} and sleeps[-1] == 0.01, sleeps


def test_the_workers_execute_preprocessor_starts_its_kernels_with_the_grading_manager():
    from nbgrader.preprocessors import Execute

    from donation_course.grading.executors.fastkernel import GradingExecute

    assert GradingExecute().kernel_manager_class is GradingKernelManager
    assert Execute().kernel_manager_class is AsyncKernelManager  # nbgrader's own, which config cannot change
