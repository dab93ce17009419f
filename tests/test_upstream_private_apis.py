"""Guards for the few private upstream APIs the course tools rely on (the
learner's package uses public JAX API, ArgInfo.shape/.dtype and
compiled.input_shardings, and one private attribute: a jitted function's
`_jit_info.static_argnums`, which explain_donation reads to name its rows).

Each was checked for a public equivalent first; where none exists the use
stays, and a test here names the upstream version it was written for, so an
upgrade that moves or changes it fails with a message that says what to
re-check, instead of a grading run that silently slows down or breaks.
"""
import inspect
import os
import subprocess
import sys
from pathlib import Path


def _version(module):
    return module.__version__


def test_jit_info_static_argnums():
    # donation_lab/explain.py names each row of explain_donation's report after
    # its parameter; lowered.args_info leaves static positional arguments out and
    # JAX has no public record of which they are, so it reads
    # fn._jit_info.static_argnums (jax 0.12.0.1), which jit completes from
    # static_argnames and, where the signature is known, turns from negative
    # into positive positions. Without it the rows say "non-static argument k".
    import jax

    where = (f"donation_lab.explain reads jit's _jit_info.static_argnums as in jax 0.12.0.1, this is "
             f"{_version(jax)}: re-check _static_positions")
    assert _version(jax) == "0.12.0.1", where
    by_name = jax.jit(lambda n, x: x * n, static_argnames="n")
    assert tuple(by_name._jit_info.static_argnums) == (0,), where
    assert tuple(jax.jit(lambda x, n: x * n, static_argnums=-1)._jit_info.static_argnums) == (1,), where
    # Without a fixed number of parameters it stays counted from the end.
    assert tuple(jax.jit(lambda *a: a[0], static_argnums=-1)._jit_info.static_argnums) == (-1,), where
    assert tuple(jax.jit(lambda x: x)._jit_info.static_argnums) == (), where


def test_jupyter_client_wait_for_ready_hooks():
    # donation_course/grading/executors/fastkernel.py overrides _async_wait_for_ready
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

    from donation_course.grading.executors.fastkernel import GradingKernelClient

    assert GradingKernelClient.wait_for_ready is GradingKernelClient._async_wait_for_ready


def test_jupyter_client_wait_and_nbgrader_execute_manager():
    # donation_course/grading/executors/kernel_manager.py overrides KernelManager._async_wait(pollinterval=0.1)
    # (jupyter_client 8.10.0), which the kill and the shutdown wait on, and fastkernel.GradingExecute passes its
    # manager as the keyword nbgrader 0.9.6's Execute sets with setdefault.
    import jupyter_client
    import nbgrader
    from jupyter_client.manager import KernelManager
    from nbgrader.preprocessors import Execute

    where = (f"kernel_manager.GradingKernelManager was written for jupyter_client 8.10.0 and nbgrader 0.9.6, these "
             f"are {_version(jupyter_client)} and {_version(nbgrader)}: re-check its overrides of _async_wait, "
             "start_kernel and shutdown_kernel, and fastkernel.GradingExecute")
    assert (_version(jupyter_client), _version(nbgrader)) == ("8.10.0", "0.9.6"), where
    params = inspect.signature(KernelManager._async_wait).parameters
    assert list(params) == ["self", "pollinterval"] and params["pollinterval"].default == 0.1, where
    assert "self._async_wait()" in inspect.getsource(KernelManager._async_kill_kernel), where
    # ... and re-wraps _async_start_kernel and _async_shutdown_kernel with in_pending_state's code, less its sleep
    from jupyter_client import manager

    wrapper = inspect.getsource(manager.in_pending_state)
    assert "await asyncio.sleep(0.01)" in wrapper and "self._ready = _get_future()" in wrapper, where
    for name in ("_async_start_kernel", "_async_shutdown_kernel"):
        assert getattr(KernelManager, name).__wrapped__.__qualname__ == f"KernelManager.{name}", where
    assert manager.AsyncKernelManager.start_kernel is KernelManager._async_start_kernel, where
    assert manager.AsyncKernelManager.shutdown_kernel is KernelManager._async_shutdown_kernel, where
    assert "kwargs.setdefault('kernel_manager_class', AsyncKernelManager)" in inspect.getsource(Execute.__init__), where


def test_nbgrader_asks_alembic_for_the_head_and_alembic_gives_it_in_process(tmp_path):
    # donation_course/grading/run/prepare.py's alembic_head_in_process replaces
    # nbgrader.api.get_alembic_version (nbgrader 0.9.6), which a new Gradebook
    # calls to stamp its alembic_version table, while a fresh course's assignment
    # is generated: the same head, from alembic's ScriptDirectory in process
    # instead of `alembic heads` in a process of its own.
    import subprocess
    import sys

    import nbgrader
    import nbgrader.api
    from nbgrader.api import Gradebook

    from donation_course.course import Course
    from donation_course.grading.run.prepare import alembic_head_in_process

    where = (f"prepare.alembic_head_in_process replaces nbgrader.api.get_alembic_version as in nbgrader 0.9.6, "
             f"this is {_version(nbgrader)}: re-check that a new Gradebook still asks it for the head")
    assert _version(nbgrader) == "0.9.6", where
    assert "get_alembic_version()" in inspect.getsource(Gradebook.__init__), where
    bindir = str(Path(sys.executable).parent)  # where `alembic` is, as ./course puts it on PATH
    heads = subprocess.run([sys.executable, "-c", "from nbgrader.api import get_alembic_version as v; print(v())"],
                           env={**os.environ, "PATH": bindir + os.pathsep + os.environ.get("PATH", "")},
                           capture_output=True, text=True, check=True).stdout.strip()
    (tmp_path / "source").mkdir()
    course = Course(tmp_path, "a")
    asked = nbgrader.api.get_alembic_version
    with alembic_head_in_process(course):
        assert nbgrader.api.get_alembic_version() == heads and len(heads) == 12, where
        with Gradebook(f"sqlite:///{course.gradebook}") as gb:  # a new gradebook, stamped with that head
            (stamped,) = gb.db.execute(nbgrader.api.text("SELECT version_num FROM alembic_version")).one()
    assert stamped == heads and nbgrader.api.get_alembic_version is asked
    with alembic_head_in_process(course):  # the gradebook exists now: nbgrader's own way is left alone
        assert nbgrader.api.get_alembic_version is asked


def test_nbconvert_create_environment_hook():
    # donation_course/grading/reports/feedback.py's CachedHTMLExporter extends
    # _create_environment (nbconvert 7.17.2) to add a jinja bytecode cache, and takes
    # HTMLExporter.from_notebook_node's steps itself (its filters, then TemplateExporter's page, then the
    # closing BeautifulSoup pass only where it has something to change).
    import jinja2
    import nbconvert
    from nbconvert.exporters import HTMLExporter

    where = (f"feedback.CachedHTMLExporter was written for nbconvert 7.17.2, this is {_version(nbconvert)}: "
             "re-check its overrides of _create_environment and from_notebook_node")
    assert _version(nbconvert) == "7.17.2", where
    assert list(inspect.signature(HTMLExporter._create_environment).parameters) == ["self"], where
    steps = inspect.getsource(HTMLExporter.from_notebook_node)
    assert "super().from_notebook_node(nb, resources, **kw)" in steps, where
    assert 'soup.select("img:not([alt])")' in steps, where
    from donation_course.grading.reports.feedback import CachedHTMLExporter

    env = CachedHTMLExporter()._create_environment()
    assert isinstance(env, jinja2.Environment) and env.bytecode_cache is not None, where


XDIST_PRIVATE = {
    # LoadScopeScheduling's methods that tests/xdist_units.py overrides or calls, with their parameters
    "__init__": ["self", "config", "log"],
    "_split_scope": ["self", "nodeid"],
    "_assign_work_unit": ["self", "node"],
    "_reschedule": ["self", "node"],
    "_pending_of": ["self", "workload"],
}


def test_xdist_scheduler_hooks():
    # tests/xdist_units.py's SharedFixtureScheduling (the suite's scheduler on
    # three processes) extends pytest-xdist 3.8.0's LoadScopeScheduling through
    # the private methods above, its workqueue and assigned_work, and a
    # worker's shutting_down and shutdown().
    import xdist
    from xdist import newhooks
    from xdist.scheduler import LoadScopeScheduling
    from xdist.workermanage import WorkerController

    where = (f"xdist_units.SharedFixtureScheduling was written for pytest-xdist 3.8.0, this is "
             f"{_version(xdist)}: re-check LoadScopeScheduling's {', '.join(XDIST_PRIVATE)}, workqueue, "
             "assigned_work, and WorkerController.shutting_down/shutdown; our _reschedule is a copy of "
             "xdist's with a lower threshold")
    assert _version(xdist) == "3.8.0", where
    for name, parameters in XDIST_PRIVATE.items():
        assert list(inspect.signature(getattr(LoadScopeScheduling, name)).parameters) == parameters, (name, where)
    assert list(inspect.signature(newhooks.pytest_xdist_make_scheduler).parameters) == ["config", "log"], where
    assert isinstance(WorkerController.shutting_down, property), where
    assert list(inspect.signature(WorkerController.shutdown).parameters) == ["self"], where
    # What our overrides assume of the methods they replace or wrap: a unit
    # goes out from the front of the workqueue (so reordering it before the
    # first one goes out decides the order), and xdist's own _reschedule
    # waits until a worker has two tests left (ours: one).
    assert "self.workqueue.popitem(last=False)" in inspect.getsource(LoadScopeScheduling._assign_work_unit), where
    assert "self._pending_of(self.assigned_work[node]) > 2" in inspect.getsource(LoadScopeScheduling._reschedule), \
        where


class _FakeWorker:
    """What a scheduler uses of xdist's WorkerController."""

    def __init__(self, name):
        from types import SimpleNamespace

        self.gateway, self.sent, self.shutting_down = SimpleNamespace(id=name), [], False

    def send_runtest_some(self, indices):
        self.sent.extend(indices)

    def shutdown(self):
        self.shutting_down = True


def test_xdist_scheduler_shares_out_units_as_intended(pytestconfig):
    # The plugin against the installed xdist, with two fake workers: the
    # waiting unit first, then the longest; a shared fixture's file is one
    # unit; a worker gets its next unit at its last test, and every test goes
    # out once.
    from types import SimpleNamespace

    import xdist_units

    assert pytestconfig.pluginmanager.get_plugin("xdist_units") is xdist_units, \
        "tests/xdist_units.py is not loaded as a plugin: `-p xdist_units` in pyproject.toml's addopts"

    waiting = next(iter(xdist_units.WAITING_UNITS)).replace("test_grading.py", "tests/test_grading.py")
    collection = ["tests/test_a.py::test_one", "tests/test_a.py::test_two",
                  "tests/test_grading_corpus.py::test_x", "tests/test_grading_corpus.py::test_y",
                  waiting, "tests/test_browser.py::test_b"]
    config = SimpleNamespace(getvalue={"tx": ["2*popen"]}.__getitem__,
                             option=SimpleNamespace(loadscopereorder=False))
    sched = xdist_units.pytest_xdist_make_scheduler(config, None)
    assert isinstance(sched, xdist_units.SharedFixtureScheduling)
    first, second = _FakeWorker("gw0"), _FakeWorker("gw1")
    for worker in (first, second):
        sched.add_node(worker)
        sched.add_node_collection(worker, collection)
    sched.schedule()
    sent = lambda worker: [collection[i] for i in worker.sent]  # noqa: E731
    # gw0: the waiting unit (one test, its last), so at once the next longest (browser);
    # gw1: the corpus, two tests, nothing more until it is down to one.
    assert sent(first) == [waiting, "tests/test_browser.py::test_b"], sent(first)
    assert sent(second) == ["tests/test_grading_corpus.py::test_x", "tests/test_grading_corpus.py::test_y"]
    sched.mark_test_complete(second, collection.index("tests/test_grading_corpus.py::test_x"))
    assert sent(second)[2:] == ["tests/test_a.py::test_one"], sent(second)
    for worker, nodeid in ((first, waiting), (second, "tests/test_grading_corpus.py::test_y"),
                           (second, "tests/test_a.py::test_one"), (first, "tests/test_browser.py::test_b")):
        sched.mark_test_complete(worker, collection.index(nodeid))
    assert sorted(sent(first) + sent(second)) == sorted(collection)
    assert not sched.workqueue and first.shutting_down and second.shutting_down


def test_jax_persistent_cache_object_a_grading_kernel_layers():
    # donation_course/grading/integrity/kernel_compile_memo.py puts its own CacheInterface in
    # jax._src.compilation_cache._cache (jax 0.12.0.1), under _cache_initialized_mutex with _cache_initialized set,
    # over the course's folder as get_file_cache opens it; JAX's compiler then reads every entry through its get
    # and writes every compile at least jax_persistent_cache_min_compile_time_secs long through its put. There is
    # no public way to give JAX a cache object. The end-to-end behaviour is
    # test_sandbox.py::test_a_grading_kernel_compiles_a_program_once_and_the_next_kernel_compiles_it_again.
    import jax
    from jax._src import compilation_cache, compiler
    from jax._src.compilation_cache_interface import CacheInterface

    where = (f"kernel_compile_memo.install layers JAX's persistent cache object as in jax 0.12.0.1, this is "
             f"{_version(jax)}: re-check jax._src.compilation_cache")
    assert _version(jax) == "0.12.0.1", where
    for name in ("_cache", "_cache_initialized", "_cache_initialized_mutex", "get_file_cache", "_get_cache"):
        assert hasattr(compilation_cache, name), where
    assert {"get", "put"} <= CacheInterface.__abstractmethods__, where
    assert "_cache" in inspect.getsource(compilation_cache._get_cache), where
    assert "persistent_cache_min_compile_time_secs" in inspect.getsource(compiler._cache_write), where
    assert list(inspect.signature(compilation_cache.get_file_cache).parameters) == ["path"], where


def test_referee_compiles_and_runs_a_handed_over_program():
    # donation_course/grading/referee/programs.py is the referee's only door into JAX's internals
    # (jax 0.12.0.1): jax._src.interpreters.mlir.make_ir_context and jax._src.lib.mlir.ir to parse StableHLO
    # text, jax._src.xla_bridge.get_backend("cpu") and jax._src.compiler.get_compile_options with the
    # client's compile_and_load(text, executable_devices=DeviceList, compile_options=...) to compile it,
    # LoadedExecutable.execute_sharded(...).disassemble_into_single_device_arrays() to run it (donated
    # inputs deleted, the output in the donated buffer), get_compiled_memory_stats() for alias bytes, and,
    # in the grading kernel, a lowering's _lowering.compile_args["kept_var_idx"] (which arguments the
    # program keeps; jit drops unused ones and the text does not say which). JAX has no public way to
    # compile a program handed over as text: jax.export runs one only inside a jit of its own, which
    # decides donation itself.
    import jax
    import numpy as np

    from donation_course.grading.referee import programs
    from donation_course.hidden.safe import device

    where = (f"grading/referee/programs.py uses jax internals as in jax 0.12.0.1, this is {_version(jax)}: "
             "re-check parse, compile_program, run, alias_bytes and kept_inputs")
    assert _version(jax) == "0.12.0.1", where
    spec = jax.ShapeDtypeStruct((4,), np.float32)
    lowered = jax.jit(lambda s, d, unused: s + d, donate_argnums=0).lower(spec, spec, spec)
    text = lowered.as_text()
    assert "tf.aliasing_output = 0" in text, where
    assert programs.kept_inputs(lowered) == [0, 1], where
    context, module = programs.parse(text)
    with context:
        assert [op.operation.name for op in module.body.operations] == ["func.func"], where
    executable = programs.compile_program(text)
    assert programs.alias_bytes(executable) == 16, where
    state = device(np.arange(4, dtype=np.float32) + 1.5)  # a buffer XLA owns (safe.device says why)
    pointer = state.unsafe_buffer_pointer()
    (out,) = programs.run(executable, [state, jax.device_put(np.ones(4, np.float32))])
    assert np.asarray(out).tolist() == [2.5, 3.5, 4.5, 5.5], where
    assert state.is_deleted() and out.unsafe_buffer_pointer() == pointer, where
    # without donation: nothing aliased, nothing deleted
    plain = programs.compile_program(jax.jit(lambda s, d: s + d).lower(spec, spec).as_text())
    state = jax.device_put(np.ones(4, np.float32))
    programs.run(plain, [state, jax.device_put(np.ones(4, np.float32))])
    assert programs.alias_bytes(plain) == 0 and not state.is_deleted(), where


def test_referee_memo_serializes_and_loads_a_compiled_program():
    # donation_course/grading/referee/compiled.py keeps what a referee child compiled for the next students
    # (jax 0.12.0.1): the CPU client's serialize_executable(LoadedExecutable) -> bytes and
    # deserialize_executable(bytes, DeviceList, compile_options) -> LoadedExecutable, as jax's persistent
    # compilation cache uses them; the loaded executable keeps its input-output aliases (donation).
    import jax
    import numpy as np

    from donation_course.grading.referee import compiled, programs
    from donation_course.hidden.safe import device

    where = (f"grading/referee/compiled.py uses jax internals as in jax 0.12.0.1, this is {_version(jax)}: "
             "re-check serialize and load")
    assert _version(jax) == "0.12.0.1", where
    spec = jax.ShapeDtypeStruct((4,), np.float32)
    text = jax.jit(lambda s, d: s + d, donate_argnums=0).lower(spec, spec).as_text()
    loaded = compiled.load(compiled.serialize(programs.compile_program(text)))
    assert programs.alias_bytes(loaded) == 16, where
    state = device(np.arange(4, dtype=np.float32))
    pointer = state.unsafe_buffer_pointer()
    (out,) = programs.run(loaded, [state, jax.device_put(np.ones(4, np.float32))])
    assert np.asarray(out).tolist() == [1.0, 2.0, 3.0, 4.0], where
    assert state.is_deleted() and out.unsafe_buffer_pointer() == pointer, where


def test_nbgrader_gradebook_engine():
    # donation_course/grading/executors/worker.py's one_engine_per_database replaces nbgrader.api's module-level
    # create_engine (nbgrader 0.9.6), which Gradebook.__init__ calls for every Gradebook; Gradebook.close disposes
    # of the engine's connections, which keeps a shared engine from holding one open between Gradebooks.
    import nbgrader
    import nbgrader.api

    where = (f"worker.one_engine_per_database was written for nbgrader 0.9.6, this is {_version(nbgrader)}: "
             "re-check how Gradebook makes and closes its engine")
    assert _version(nbgrader) == "0.9.6", where
    assert "self.engine = create_engine(db_url" in inspect.getsource(nbgrader.api.Gradebook.__init__), where
    assert "self.engine.dispose()" in inspect.getsource(nbgrader.api.Gradebook.close), where


def test_jax_looks_for_pjrt_plugins_and_imports_its_dialects_before_a_fork_without_a_backend_or_a_thread():
    # integrity/jax_before_fork.py, called by the kernel zygote and the referee server before they fork, calls
    # jax._src.xla_bridge._discover_and_register_pjrt_plugins and touches jax._src.lib.mlir.dialects' lazily
    # imported modules (jax 0.12.0.1), so that a kernel's or a child's first backend and first MLIR context do not
    # do either again. That must start no backend and no thread (both fork after it), and the backend must skip
    # the plugins after.
    import jax
    from jax._src import xla_bridge
    from jax._src.interpreters import mlir

    where = (f"jax_before_fork.prepare_jax_for_forks relies on jax 0.12.0.1, this is {_version(jax)}: re-check "
             "jax._src.xla_bridge and jax._src.interpreters.mlir._create_ir_context")
    assert _version(jax) == "0.12.0.1", where
    assert "_plugins_registered" in inspect.getsource(xla_bridge._discover_and_register_pjrt_plugins), where
    assert "_discover_and_register_pjrt_plugins()" in inspect.getsource(xla_bridge.backends), where
    assert all(f"dialects.{name}" in inspect.getsource(mlir._create_ir_context)
               for name in ("mhlo", "chlo", "hlo", "sdy", "mpmd")), where
    code = ("import os, sys, jax\nfrom jax._src import xla_bridge\n"
            "from donation_course.grading.integrity.jax_before_fork import prepare_jax_for_forks\n"
            "prepare_jax_for_forks()\n"
            "print(xla_bridge._plugins_registered, bool(xla_bridge._backends), len(os.listdir('/proc/self/task')),"
            " all(f'jaxlib.mlir.dialects.{n}' in sys.modules for n in ('mhlo', 'chlo', 'sdy', 'builtin')))")
    env = {"PATH": "/usr/bin:/bin", "JAX_PLATFORMS": "cpu", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1", "HOME": "/tmp"}
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.stdout.split() == ["True", "False", "1", "True"], (out.stdout, out.stderr[-2000:])
