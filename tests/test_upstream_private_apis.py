"""Guards for the few private upstream APIs the course tools rely on (the
learner's package uses public JAX API only: ArgInfo.shape/.dtype,
compiled.input_shardings).

Each was checked for a public equivalent first; where none exists the use
stays, and a test here names the upstream version it was written for, so an
upgrade that moves or changes it fails with a message that says what to
re-check, instead of a grading run that silently slows down or breaks.
"""
import inspect



def _version(module):
    return module.__version__


def test_jupyter_client_wait_for_ready_hooks():
    # donation_course/grading/fastkernel.py overrides _async_wait_for_ready
    # (jupyter_client 8.10.0) and calls _handle_kernel_info_reply and
    # _async_is_alive, to skip the 0.2 s IOPub wait after every kernel start.
    import jupyter_client
    from jupyter_client.asynchronous import AsyncKernelClient

    where = (f"fastkernel.GradingKernelClient was written for jupyter_client 8.10.0, this is "
             f"{_version(jupyter_client)}: re-check its override of _async_wait_for_ready")
    assert _version(jupyter_client) == "8.10.0", where
    assert list(inspect.signature(AsyncKernelClient._async_wait_for_ready).parameters) == ["self", "timeout"], where
    assert list(inspect.signature(AsyncKernelClient._handle_kernel_info_reply).parameters) == ["self", "msg"], where
    assert inspect.iscoroutinefunction(AsyncKernelClient._async_is_alive), where
    # The public wait_for_ready is the private coroutine in this version: our
    # override must replace both names.
    assert AsyncKernelClient.wait_for_ready.__name__ == "_async_wait_for_ready", where

    from donation_course.grading.fastkernel import GradingKernelClient

    assert GradingKernelClient.wait_for_ready is GradingKernelClient._async_wait_for_ready


def test_nbconvert_create_environment_hook():
    # donation_course/grading/feedback.py's CachedHTMLExporter extends
    # _create_environment (nbconvert 7.17.2) to add a jinja bytecode cache.
    import jinja2
    import nbconvert
    from nbconvert.exporters import HTMLExporter

    where = (f"feedback.CachedHTMLExporter was written for nbconvert 7.17.2, this is {_version(nbconvert)}: "
             "re-check its override of _create_environment")
    assert _version(nbconvert) == "7.17.2", where
    assert list(inspect.signature(HTMLExporter._create_environment).parameters) == ["self"], where
    from donation_course.grading.feedback import CachedHTMLExporter

    env = CachedHTMLExporter()._create_environment()
    assert isinstance(env, jinja2.Environment) and env.bytecode_cache is not None, where

