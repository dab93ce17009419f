"""The static scan as a policy, not a blocklist (issue 20, layer 1).

For each family of ways a learner's code can reach the checks, the interpreter
or the machine, a handful of variants that must be flagged (the four that were
graded 10/10 unflagged against the old blocklist first, then the rest), and
beside each family the nearest honest constructs, which must not be. The
corpus and the solutions (tests/test_sandbox.py) keep their status too.
"""
import nbformat
import pytest

from donation_course.grading.integrity import scan_policy
from donation_course.grading.integrity.scan import Flag, scan_notebook, scan_source

# The four exploits that scored 10/10 unflagged against the blocklist (answer: `return state * 0`).
WRONG = ("@functools.partial(jax.jit, donate_argnums=(0,))\ndef update_with_donate(state, delta):\n"
         "    return state * 0\n")
EXPLOITS = {
    "getattr alias, through a helper module's own sys import": WRONG + (
        "from donation_lab import memory\n"
        "g = getattr\n"
        "hidden = g(g(memory, 'sys'), 'modules')['donation_course.hidden.exercise']\n"
        "g(hidden, '__dict__')['check_values'] = lambda *a, **k: print('\\u2714 values')\n"),
    "operator.attrgetter with the names in a string": WRONG + (
        "import operator\nfrom donation_lab import memory\n"
        "hidden = operator.attrgetter('sys.modules')(memory)['donation_course.hidden.exercise']\n"
        "operator.attrgetter('__dict__')(hidden)['check_values'] = print\n"),
    "string.Formatter().get_field": WRONG + (
        "import string\nfrom donation_lab import memory\n"
        "mods, _ = string.Formatter().get_field('0.sys.modules', [memory], {})\n"
        "hidden, _ = string.Formatter().get_field('0[donation_course.hidden.exercise].__dict__', [mods], {})\n"
        "hidden['check_values'] = print\n"),
    "a pickle written with numpy, loaded by np.load(allow_pickle=True), whose reduce runs exec": WRONG + (
        "import numpy as np\n"
        "head = b\"\\x93NUMPY\\x01\\x00v\\x00{'descr': '|O', 'fortran_order': False, 'shape': (1,), }\"\n"
        "body = b\"cbuiltins\\nexec\\n(S'import donation_course.hidden.exercise as h; h.check_values = print'\\ntR.\"\n"
        "np.frombuffer(head.ljust(127) + b'\\n' + body, dtype=np.uint8).tofile('p.npy')\n"
        "np.load('p.npy', allow_pickle=True)\n"),
}

# family: (variants that must be flagged, the nearest honest constructs that must not be)
FAMILIES = {
    "reflective builtins under another name (getattr aliases)": ([
        "g = getattr\n",
        "from builtins import getattr as g\n",
        "g = __builtins__.getattr\n",
        "g = __builtins__['getattr']\n",
        "def f(obj, g=getattr):\n    return g(obj, 'x')\n",
        "f = lambda obj, g=getattr: g(obj, 'sys')\n",
        "functools.reduce(getattr, ['sys', 'modules'], memory)\n",
        "list(map(getattr, [memory], ['sys']))\n",
        "functools.partial(getattr, memory)('sys')\n",
        "[getattr][0](memory, 'sys')\n",
        "getattr.__call__(memory, 'sys')\n",
        "sorted([memory], key=getattr)\n",
        "class A:\n    g = getattr\n",
        "h = hasattr\n",
        "v = vars\n",
    ], [
        "n = getattr(state, 'shape')\n",
        "n = getattr(state, 'shape', None)\n",
        "ok = hasattr(state, 'delete')\n",
        "d = {k: getattr(p, 'w') for k, p in params.items()}\n",
    ]),
    "getattr with a computed or forbidden name": ([
        "x = getattr(memory, 'sys')\n",
        "x = getattr(memory, 's' + 'ys')\n",
        "x = getattr(jnp, name)\n",
        "x = getattr(memory, *['sys'])\n",
        "x = getattr(memory, f'{name}')\n",
        "x = getattr(checks, '__dict__')\n",
        "x = getattr(f, '__globals__')\n",
        "x = getattr(np, 'load')\n",
        "x = getattr(getattr(np, 'testing'), 'measure')\n",
        "ok = hasattr(memory, name)\n",
    ], [
        "dtype = getattr(jnp, 'float32')\n",
        "n = getattr(state, 'size', 0)\n",
    ]),
    "attribute getters that take names as data (operator, matplotlib)": ([
        "import operator\nget = operator.attrgetter('sys.modules')\n",
        "from operator import attrgetter\n",
        "import operator as op\nop.methodcaller('__getattribute__', 'sys')(memory)\n",
        "from operator import methodcaller\n",
        "op = __import__('operator')\n",
        "ag = np.core.numeric.operator.attrgetter\n",
        "import itertools\nlist(itertools.starmap(getattr, [(memory, 'sys')]))\n",
        "plt.getp(memory, 'sys')\n",
        "from matplotlib.artist import setp\n",
        "name = 'attrgetter'\n",
    ], [
        "import functools\nstep = functools.partial(jax.jit, donate_argnums=0)(lambda s, d: s + d)\n",
        "total = functools.reduce(lambda a, b: a + b, [1, 2, 3])\n",
        "import itertools\npairs = list(itertools.product([0, 1], repeat=2))\n",
        "out = jax.lax.add(state, delta)\n",
        "new = jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)\n",
        "leaves = jax.tree.leaves(params)\nflat = jax.tree_util.tree_flatten_with_path(params)[0]\n",
        "_step = jax.jit(lambda s, d: s + d, donate_argnums=0)\n\n"
        "def update_with_donate(state, delta):\n    return _step(state, delta)\n",  # a wrapper around a jitted function
        "def helper(x):\n    return jnp.where(x > 0, x, 0.0)\n\nout = helper(jnp.arange(3.0)).sum()\n",
        "from jax import lax\nout = lax.fori_loop(0, 3, lambda i, x: x + 1, state)\n",
    ]),
    "format strings that read attributes (string.Formatter, str.format)": ([
        "import string\nstring.Formatter().get_field('0.sys', [memory], {})\n",
        "from string import Formatter\n",
        "s = '{0.__class__}'.format(x)\n",
        "s = '{0.sys}'.format(np)\n",
        "s = '{0.np.sys}'.format(checks)\n",
        "s = '{0.__init__.__globals__}'.format(f)\n",
        "s = '{0[__builtins__]}'.format(d)\n",
        "s = '{0:{1.__class__}}'.format(1, x)\n",
        "s = '{0[a:b].__class__}'.format(d)\n",
        "s = str.format('{0.sys}', memory)\n",
        "s = '{m.sys}'.format_map({'m': memory})\n",
        "s = ('{0.' + 'sys}').format(memory)\n",
        "t = '{0.sys}'\ns = t.format(memory)\n",
        "f = '{0.sys}'.format\n",
        "import string\nstring.Template('$x').substitute(x=1)\n",
        "import logging\nlogging.Formatter('%(message)s')\n",
    ], [
        "s = '{:.3f}'.format(x)\n",
        "s = '{0} {1!r}'.format(a, b)\n",
        "s = '{name}: {value:>8.2f}'.format(name=n, value=v)\n",
        "s = '{0.shape}'.format(state)\n",
        "s = f'{x:.3f} {state.shape} {state.dtype}'\n",
        "s = f'{x!r:>{width}}'\n",
        "s = '%s took %.1f ms' % (name, ms)\n",
    ]),
    "loaders that run code (pickles) and file access": ([
        "np.load('x.npy', allow_pickle=True)\n",
        "np.load('x.npy', allow_pickle=flag)\n",
        "np.load('x.npy', **{'allow_pickle': True})\n",
        "np.load('x.npy')\n",  # decided: honest answers never read files
        "import numpy\nnumpy.load('x.npy')\n",
        "from numpy import load as L\n",
        "jnp.load('x.npy')\n",
        "np.lib.format.read_array(f, allow_pickle=True)\n",
        "np.lib.npyio.NpzFile('x.npz')\n",
        "import pickle\npickle.loads(b'')\n",
        "import marshal\n", "import shelve\n", "import dill\n",
        "import pandas as pd\npd.read_pickle('x')\n",
        "import torch\ntorch.load('x')\n",
        "class E:\n    def __reduce__(self):\n        return (print, ('x',))\n",
        "class E:\n    def __reduce_ex__(self, protocol):\n        return (print, ('x',))\n",
        # writing a file: what the notebook wrote could be imported (a module the grader cannot find is let through)
        "np.savetxt('helper.py', [], header='import os', comments='')\n",
        "np.asarray(code).tofile('helper.cpython-311-x86_64-linux-gnu.so')\n",
        "for i in range(3):\n    np.ones(2**10).tofile(f'fill-{i}')\n",  # the corpus' diskfill
        "np.save('state.npy', np.ones(3))\n", "plt.savefig('losses.png')\n",
        "from jax.experimental.serialize_executable import deserialize_and_load\n",
        "jax.export.deserialize(b'')\n",
        "np.fromfile('x')\n",
        "np.memmap('x')\n",
        "open('/etc/hosts')\n",
    ], [
        "host = np.asarray(result)\n",
        "host = np.array(jax.device_get(result))\n",
        "np.testing.assert_allclose(np.asarray(out), [1.5, 2.5])\n",
        "from numpy.testing import assert_allclose, assert_array_equal\n",
        "import numpy as np\nx = np.ones(3, dtype=np.float32).reshape(3, 1)\n",
    ]),
    "dunder attributes and subclasses": ([
        "for k in ().__class__.__base__.__subclasses__():\n    pass\n",
        "object.__subclasses__()\n",
        "c = x.__class__\n",
        "m = type(x).__mro__\n",
        "g = f.__globals__\n",
        "c = f.__code__\n",
        "d = checks.__dict__\n",
        "w = jax.jit(f).__wrapped__\n",
        "match memory:\n    case object(__dict__=d):\n        d['x'] = 1\n",
        "match memory:\n    case object(sys=s):\n        pass\n",
        # register_dataclass reads the attributes it is told to: on the module type, any module's __dict__
        "jax.tree_util.register_dataclass(type(checks.np), data_fields=['__' + 'dict__'], meta_fields=[])\n",
        "functools.partial(jax.tree_util.register_dataclass, data_fields=names, meta_fields=[])(T)\n",
        "from jax.tree_util import register_dataclass\n",
        "x = type('X', (), {})\n",
        "y = type(x)(1)\n",
        "class F:\n    def __array__(self, dtype=None):\n        return 1\n",
        "class F:\n    def __getattr__(self, name):\n        return 1\n",
        "class F:\n    def __init_subclass__(cls):\n        pass\n",
        "class F:\n    def __array_function__(self, *a):\n        return True\n",
        "x = dict(__reduce__=f)\n",
    ], [
        "name = update_with_donate.__name__\n",
        "print(jax.__version__)\n",
        "n = type(state).__name__\n",
        "ok = isinstance(out, jax.Array)\n",
        "def f(a):\n    return a.__len__()\n",
        "class Updater:\n    def __init__(self):\n        self.step = jax.jit(lambda s, d: s + d, donate_argnums=0)\n"
        "    def __call__(self, state, delta):\n        return self.step(state, delta)\n",
        "class Base:\n    def __init__(self, w):\n        self.w = w\n\n"
        "class Child(Base):\n    def __init__(self, w):\n        super().__init__(w)\n",
        "match params:\n    case {'w': w, 'b': b}:\n        pass\n",
        "match p:\n    case Point(x=0, y=y):\n        pass\n",
    ]),
    "the builtins namespace, globals(), frames": ([
        "b = __builtins__\n",
        "import builtins\n",
        "e = __builtins__['eval']\n",
        "from builtins import eval\n",
        "globals()['checks'] = None\n",
        "l = locals()\n",
        "v = vars()\n",
        "names = dir(checks)\n",
        "f = (lambda: (yield))().gi_frame.f_globals\n",
        "try:\n    1 / 0\nexcept Exception as e:\n    fr = e.__traceback__.tb_frame\n",
        "x = _dl_hidden\n",
        "_dl_hidden.check_values = print\n",
        "import numpy as _dl_hidden\n",
        "def f():\n    global _dl_hidden\n    _dl_hidden = None\n",
    ], [
        "LEARNING_RATE = 0.1\n\ndef step(x):\n    global LEARNING_RATE\n    LEARNING_RATE *= 0.5\n    return x\n",
        "_cache = {}\n\ndef _helper(x):\n    return x + 1\n",
        "names = ['w', 'b']\nfirst = names[0]\n",
        "label = '_'.join(['loss', 'curve'])\n",
    ]),
    "sys.modules and modules outside the allowlist as attributes": ([
        "import sys\nsys.modules['donation_course.hidden.exercise']\n",
        "m = np.sys\n", "m = jax.sys\n", "m = checks.np.sys\n", "m = memory.sys.modules\n",
        "m = np.os\n", "from donation_lab.memory import subprocess\n", "from donation_lab.memory import sys as s\n",
        "i = donation_lab.explain.inspect\n",
        "key = 'sys'\n",
        "key = 'donation_course.hidden.exercise'\n",
        "import donation_course.hidden.exercise as h\n",
        "from donation_course.hidden import exercise\n",
        "import os\n", "import glob\n", "import socket\n", "import psutil\n", "import inspect\n", "import gc\n",
        "import types\n", "import timeit\n",
    ], [
        "import math\nr = math.sqrt(2.0)\n",
        "import time\nt0 = time.perf_counter()\n",
        "import collections\nc = collections.Counter('abc')\n",
        "from typing import Any, Callable, NamedTuple\n",
        "import dataclasses\n\n@dataclasses.dataclass\nclass P:\n    w: jax.Array\n    b: float = 0.0\n",
        "from dataclasses import dataclass, field\n\n@dataclass(frozen=True)\nclass Cfg:\n    lr: float = 0.1\n"
        "    names: list = field(default_factory=list)\n",
        "from __future__ import annotations\n",
        "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot([1, 2])\nplt.show()\n",
        "plt.rcParams['figure.figsize'] = (6, 3)\n",
        "from donation_lab import checks\nfrom donation_lab.memory import compare_donation\n",
        "import jax.numpy as jnp\nfrom jax.sharding import NamedSharding, PartitionSpec as P\n",
        "import no_such_module_xyz\n",  # decided: a typo only raises ModuleNotFoundError (corpus 'importerror')
    ]),
    "importlib and imports by name": ([
        "import importlib\nimportlib.import_module('os')\n",
        "from importlib import import_module\n",
        "os = __import__('os')\n",
        "help('os')\n",
        "plt.switch_backend('module://donation_course.hidden.exercise')\n",
        "plt.rcParams['backend'] = 'module://os'\n",
        "plt.rcParams['backend'] = name\n",
        "from . import helper\n",
        "from .helper import f\n",
        "from jax.numpy import *\n",
        "import jax._src.api\n",
        "from jax._src import config\n",
        "c = jax._src.config\n",
    ], [
        "import jax\nimport jax.numpy as jnp\nfrom jax import tree_util\n",
        "from jax.experimental import pjit\n",
        "import numpy.testing\nnumpy.testing.assert_allclose(1.0, 1.0)\n",
    ]),
    "code the scan cannot read (exec, eval, compile, strings run as code)": ([
        "exec('1')\n", "eval('1')\n", "compile('1', 'f', 'exec')\n",
        "e = exec\n",
        "np.testing.runstring('1', {})\n",
        "np.testing.measure('1')\n",
        "t = np.testing\n",
        "import numpy.testing as npt\n",
        "from numpy import testing\n",
        "from numpy.testing import measure\n",
        "import typing\nh = typing.get_type_hints(f)\n",
        "from typing import get_type_hints\n",
        "import timeit\ntimeit.timeit('1')\n",
        "breakpoint()\n",
        "exit()\n",
    ], [
        "def loss(params, x, y):\n    return jnp.mean((x @ params['w'] + params['b'] - y) ** 2)\n",
        "compiled = jax.jit(f).lower(x).compile()\n",
        "text = jax.jit(f).lower(x).as_text()\n",
    ]),
    "attribute assignment outside a method's self (monkeypatching)": ([
        "np.allclose = lambda *a, **k: True\n",
        "checks.expect_allclose = print\n",
        "del jnp.allclose\n",
        "type(state).is_deleted = lambda s: True\n",
        "jax.Array.is_deleted = lambda s: True\n",
        "setattr(checks, 'require', print)\n",
        "delattr(checks, 'require')\n",
        "def patch(self, v):\n    self.is_deleted = v\n",
        "class A:\n    def f(self, v):\n        self.is_deleted = v\n\nA.f(type(state), lambda s: True)\n",
        "class A:\n    def __init__(self, v):\n        self.is_deleted = v\n\nA.__init__(type(state), 1)\n",
        "class A:\n    @staticmethod\n    def f(self, v):\n        self.x = v\n\nA.f(np, 1)\n",
        "class A:\n    def f(self, v):\n        self.x = v\n\nm = getattr(A, 'f')\n",
        "class A:\n    def f(self, v):\n        self = type(v)\n        self.is_deleted = lambda s: True\n",
        "class A:\n    def f(self, v):\n        def g():\n            v.x = 1\n        return g\n",
        "functools.wraps(fake, ('is_deleted',), ())(type(state))\n",
        "functools.partial(functools.wraps, fake, ('is_deleted',), ())()(type(state))\n",
        "from functools import wraps\nw = wraps\n",
        "functools.update_wrapper(type(state), fake, assigned=('is_deleted',))\n",
        "functools.wraps(twin)(update_with_donate)\n",
        "from functools import wraps\nwraps(Payload())(jnp)\n",
        "w = functools.wraps(fake)\n",
        "@functools.wraps(fake)\nclass A:\n    pass\n",
        "jax.Array.register(Fake)\n",
        "A.f(np, 1)\n",
        "class A:\n    def f(self, v):\n        self.is_deleted = v\n\ntype(A()).f(type(state), 1)\n",
        "class A:\n    def f(self, v):\n        self.is_deleted = v\n\nB = A\nB.f(type(state), 1)\n",
        "class A:\n    def f(self, v):\n        self.is_deleted = v\n\n[A][0].f(type(state), 1)\n",
        "class A:\n    class B:\n        def f(self, v):\n            self.x = v\n\nA.B.f(np, 1)\n",
    ], [
        "class A:\n    def f(self, v):\n        self.v = v\n\na = A()\na.f(1)\nok = isinstance(a, A)\n"
        "A().f(2)\n\nclass B(A):\n    def f(self, v):\n        super().f(v)\n",
        "class Momentum:\n    def __init__(self, beta):\n        self.beta = beta\n        self.velocity = None\n\n"
        "    def update(self, grads):\n        self.velocity = grads\n        return self.velocity\n",
        "import functools\n\ndef deco(f):\n    @functools.wraps(f)\n    def inner(*a):\n        return f(*a)\n"
        "    return inner\n",
        "from functools import wraps\n\ndef deco(f):\n    @wraps(f)\n    def inner(*a):\n        return f(*a)\n"
        "    return inner\n",
        "@functools.partial(jax.jit, donate_argnums=0)\n@functools.wraps(add)\ndef step(s, d):\n    return add(s, d)\n",
        "state = state.at[0].set(1.0)\n",
        "params = {**params, 'w': params['w'] * 2}\n",
    ]),
    "raw memory and the machine (ctypes, frames, the process)": ([
        "import ctypes\n", "lib = np.ctypeslib\n", "p = state_np.ctypes.data\n",
        "from numpy.lib.stride_tricks import as_strided\n",
        "m = memoryview(b'x')\n",
        "import sys\nf = sys._getframe(1)\n",
        "e = os.environ\n",
        "os.system('id')\n",
        "import subprocess\n",
    ], [
        "p = state.unsafe_buffer_pointer()\n",
        "state.delete()\nassert state.is_deleted()\n",
        "out = update(x, y).block_until_ready()\n",
        "dev = jax.devices()[0].platform\n",
    ]),
    "IPython: the shell, magics and their code": ([
        "%env XLA_FLAGS=x\n", "!ls /\n", "files = !ls\n", "%run helper.py\n", "%%writefile helper.py\nx = 1\n",
        "%%bash\nls\n", "%load_ext autoreload\n", "%config Application.log_level = 0\n", "ip = get_ipython()\n",
        "get_ipython().run_line_magic('timeit', code)\n",
        "get_ipython().run_line_magic('timeit', 'f()', _stack_depth=2)\n",
        "%timeit getattr(x, name)\n", "%timeit -n1 -r1 exec('1')\n", "%%timeit\nimport os\n",
        "%%timeit import os\nf()\n", "%time !ls\n", "x?\n", "%timeit -n 1 -- np.load('x')\n",
        # one-line cells: IPython's automagic runs them as magics (a SyntaxError for Python, not for the kernel)
        "system id\n", "system ('cat /etc/passwd')\n", "run helper.py\n", "env XLA_FLAGS=x\n", "cd /\n",
        "ls -la\n", "pip install requests\n", "load_ext autoreload\n", "%timeit system id\n",
    ], [
        "%timeit update(x, y)\n",
        "%timeit -n 3 -r 1 update(x, y).block_until_ready()\n",
        "%%timeit\nupdate(x, y).block_until_ready()\n",
        "%%timeit -n1 -r1 s = jnp.ones(3)\nupdate(s, s)\n",
        "%time out = update(x, y)\n",
        "t = %timeit -o -q update(x, y)\n",
        "import warnings\nwith warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n    f(x)\nmessages = [str(w.message) for w in caught]\n",
        "import warnings\nwarnings.filterwarnings('ignore', message='Some donated buffers were not usable')\n",
        "timeit(update_with_donate)\n",  # automagic: %timeit (update_with_donate)
        "time.sleep(0.1)\n", "ls = [1, 2]\n", "history, best = [], None\n",  # not automagic (IPython's own rules)
    ]),
    "__future__ features other than annotations (issue 32: one changes how later cells parse)": ([
        "from __future__ import barry_as_FLUFL\n",
        "from __future__ import annotations, barry_as_FLUFL\n",
        "from __future__ import generator_stop\n",
        "from __future__ import nested_scopes as n\n",
        "x = 1\nfrom __future__ import division\n",  # IPython compiles each statement alone: it takes effect
        "from __future__ import braces\n",
    ], [
        "from __future__ import annotations\n",
        "from __future__ import annotations\n\ndef f(x: jax.Array) -> jax.Array:\n    return x\n",
        "import dataclasses\nfrom typing import Optional\n",
    ]),
    "programs matplotlib starts, and the files it writes (issue 32: its animation writers run rcParams' paths)": ([
        "matplotlib.rcParams['animation.ffmpeg_path'] = '/bin/sh'\n",
        "plt.rcParams['animation.convert_path'] = 'sh'\n",
        "from matplotlib.animation import FFMpegWriter\n",
        "w = matplotlib.animation.ImageMagickWriter(fps=1)\n",
        "anim.to_html5_video()\n",
        "from matplotlib import font_manager\nfont_manager.json_dump({}, 'x')\n",
        "matplotlib.animation.writers['ffmpeg']\n",
    ], [
        "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.title('loss')\nplt.show()\n",
        "matplotlib.rcParams['figure.figsize'] = (4, 3)\n",
        "from matplotlib import animation\nanim = animation.FuncAnimation(fig, step, frames=3)\n"
        "html = anim.to_jshtml()\n",
    ]),
}
ATTACKS = [(family, source) for family, (bad, _) in FAMILIES.items() for source in bad]
CONTROLS = [(family, source) for family, (_, good) in FAMILIES.items() for source in good]


@pytest.mark.parametrize("name", list(EXPLOITS))
def test_the_four_exploits_that_scored_full_marks_are_flagged(name):
    found = scan_source(EXPLOITS[name])
    assert found, name
    assert all(line > 3 for line, _ in found), found  # the wrong answer itself is fine: the tampering lines are flagged


@pytest.mark.parametrize("family, source", ATTACKS)
def test_every_variant_of_a_family_is_flagged(family, source):
    assert scan_source(source), (family, source)


@pytest.mark.parametrize("family, source", CONTROLS)
def test_the_nearest_honest_construct_is_not_flagged(family, source):
    assert scan_source(source) == [], (family, source)


@pytest.mark.parametrize("source, rule", [
    ("import os\n", "imports os (import outside the allowlist)"),
    ("from numpy import load\n", "a loader"),
    ("g = getattr\n", "reflective access: getattr used as a value"),
    ("x = getattr(jnp, name)\n", "reflective access: getattr with a computed name"),
    ("x = getattr(memory, 'sys')\n", "module outside the allowlist"),
    ("m = np.os\n", ".os: module outside the allowlist"),
    ("c = x.__class__\n", "dunder attribute"),
    ("c = jax._src\n", "private attribute"),
    ("s = '{0.sys}'.format(x)\n", "format string reads sys"),
    ("np.load('x', allow_pickle=True)\n", "allow_pickle: a loader that runs code"),
    ("np.allclose = print\n", "assigns attribute np.allclose"),
    ("print(np)\n", "np used as a value (a module"),
    ("%env A=1\n", "IPython's shell (get_ipython)"),
    ("%timeit exec('1')\n", "%timeit: exec() runs code"),
])
def test_each_flag_names_the_rule_it_broke(source, rule):
    found = scan_source(source)
    assert any(rule in reason for _, reason in found), found


def test_a_flag_gives_the_line_it_is_on():
    assert [line for line, _ in scan_source("x = 1\ny = 2\nimport os\n")] == [3]
    assert str(Flag("07", "ex-answer", 3, "imports os")) == "07/ex-answer line 3: imports os"


def test_the_policy_is_an_allowlist_and_no_allowed_module_is_also_denied():
    assert not scan_policy.ALLOWED_MODULES & scan_policy.DENIED_MODULES
    denied_everywhere = {"operator", "string", "timeit", "pickle", "importlib", "builtins", "sys", "os"}
    assert not denied_everywhere & scan_policy.ALLOWED_MODULES
    assert "warnings" in scan_policy.ALLOWED_MODULES  # lesson 3 teaches it
    assert scan_policy.MAGICS == {"time", "timeit"}
    for source in ("import abc\n", "import json\n", "import random\n", "import copy\n", "import ipywidgets\n"):
        assert scan_source(source), source  # not on the list (installed or stdlib): flagged although harmless


def test_a_notebook_answering_with_warnings_and_timeit_is_not_flagged():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import functools\nimport jax\nimport jax.numpy as jnp\n"
                                          "from donation_lab import checks\n"),
                nbformat.v4.new_code_cell(
                    "import warnings\n\n@functools.partial(jax.jit, donate_argnums=(0,))\n"
                    "def update_with_donate(state, delta):\n    return state + delta\n\n"
                    "x, d = jnp.ones(3), jnp.ones(3)\nwith warnings.catch_warnings():\n"
                    "    warnings.simplefilter('ignore')\n    x = update_with_donate(x, d)\n"),
                nbformat.v4.new_code_cell("%timeit update_with_donate(jnp.ones(3), d).block_until_ready()\n")]
    assert scan_notebook(nb, "07") == []


def test_a_module_the_grader_cannot_find_is_let_through_but_no_notebook_can_write_one():
    def nb(*sources):
        book = nbformat.v4.new_notebook()
        book.cells = [nbformat.v4.new_code_cell(s, id=f"c{i}") for i, s in enumerate(sources)]
        return [(f.cell, f.reason) for f in scan_notebook(book, "07")]

    assert nb("import no_such_module_xyz\n") == []  # a typo: ModuleNotFoundError, nothing runs (corpus 'importerror')
    assert nb("np.savetxt('helper.py', [], header='import os', comments='')\n", "import helper\n") == [
        ("c0", ".savetxt: file-system or raw-memory access (writes and reads files)")]
    assert nb("import numpy\n") == [] and nb("import os\n")  # installed or not, a known module is judged by the list


def test_module_names_and_learner_classes_are_known_across_the_notebooks_cells():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import numpy as onp\n"),
                nbformat.v4.new_code_cell("class A:\n    def f(self, v):\n        self.x = v\n"),
                nbformat.v4.new_code_cell("A.f(onp, 1)\n")]
    reasons = [f.reason for f in scan_notebook(nb, "07")]
    assert any("onp used as a value" in r for r in reasons), reasons
    assert any("A.f: a method called through its class" in r for r in reasons), reasons


def test_a_cell_nbgrader_runs_as_code_is_read_whatever_its_type():
    """A markdown or raw cell with the grade_id of a release code cell is made code again and run by nbgrader's
    OverwriteCells (whatever its nbgrader flags): the scan reads it (corpus 'markdowncell', 'capmarkdown'); a
    markdown note of the learner's own (no grade_id, or a markdown cell's) is never run, and is not read."""
    def cell(make, source, gid=None, **flags):
        c = make(source, id=gid or "note")
        if gid:
            c.metadata["nbgrader"] = {"grade_id": gid, "schema_version": 3, **flags}
        return c

    release = nbformat.v4.new_notebook()
    release.cells = [cell(nbformat.v4.new_code_cell, "import jax\n", "ex-setup", locked=True),
                     cell(nbformat.v4.new_code_cell, "raise NotImplementedError()\n", "ex-answer", solution=True),
                     cell(nbformat.v4.new_markdown_cell, "YOUR ANSWER HERE", "ex-written", solution=True)]
    bad = "x = getattr(jax, 'all' + 'close')\n"
    for make in (nbformat.v4.new_markdown_cell, nbformat.v4.new_raw_cell):
        for flags in ({"solution": True}, {}):
            nb = nbformat.v4.new_notebook()
            nb.cells = [release.cells[0], cell(make, bad, "ex-answer", **flags)]
            assert [f.cell for f in scan_notebook(nb, "07", release)] == ["ex-answer"], (make, flags)
    nb = nbformat.v4.new_notebook()
    nb.cells = [release.cells[0], cell(nbformat.v4.new_markdown_cell, bad),
                cell(nbformat.v4.new_markdown_cell, bad, "ex-written", solution=True),
                cell(nbformat.v4.new_markdown_cell, "import jax\n", "ex-answer", solution=True)]
    assert scan_notebook(nb, "07", release) == []


def test_cells_are_parsed_in_order_with_the_future_flags_of_the_cells_before_them():
    """IPython keeps a `from __future__` flag for later cells: a cell that parses only under barry_as_FLUFL is read
    (and flagged) after the cell that turns it on; a cell the scan cannot parse is named as unread, not flagged
    (the audit flags it if the kernel runs it: tests/test_sandbox.py)."""
    from donation_course.grading.integrity.audit_log import parsed_digests
    from donation_course.grading.integrity.scan import read_notebook

    later = "if 1 <> 2:\n    x = getattr(jnp, 'all' + 'close')\n"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("from __future__ import barry_as_FLUFL\n"), nbformat.v4.new_code_cell(later)]
    found = read_notebook(nb, "07")
    assert any("barry_as_FLUFL" in f.reason for f in found.flags), found.flags
    assert any("getattr" in f.reason for f in found.flags), found.flags  # the second cell was read
    assert parsed_digests(later) <= found.read and not found.unread
    nb.cells = nb.cells[1:]  # without the flag the kernel cannot parse it either: unread, not flagged
    found = read_notebook(nb, "07")
    assert found.flags == [] and set(found.unread) == parsed_digests(later) and not found.read
    assert "cannot parse" in next(iter(found.unread.values())).reason
    nb.cells = [nbformat.v4.new_code_cell("from __future__ import annotations\n"),
                nbformat.v4.new_code_cell("x = 1 != 2\n")]
    found = read_notebook(nb, "07")
    assert found.flags == [] and not found.unread and len(found.read) >= 2
