"""What the runtime audit (audit.py) watches, as data, and the two snapshots it compares.

audit.py binds every name here into its hook's closure when it installs it,
so rebinding these module globals later changes nothing the hook does.
"""

# event -> rule; the learner did it when its frame is the immediate caller (DIRECT) or anywhere (ANY)
DIRECT, ANY = "direct", "any"
RULES = {
    "exec": ANY, "compile": ANY, "code.__new__": ANY, "function.__new__": ANY,
    "sys._getframe": DIRECT, "object.__getattr__": DIRECT, "object.__setattr__": DIRECT,
    "object.__delattr__": DIRECT,
    "pickle.find_class": ANY, "marshal.loads": ANY, "marshal.load": ANY, "sys.settrace": ANY,
    "sys.setprofile": ANY, "sys._current_frames": ANY, "sys.addaudithook": ANY, "gc.get_objects": ANY,
    "gc.get_referrers": ANY, "gc.get_referents": ANY, "os.system": ANY, "os.exec": ANY, "os.posix_spawn": ANY,
    "os.spawn": ANY, "subprocess.Popen": ANY, "os.fork": ANY, "os.forkpty": ANY, "os.kill": ANY,
    "os.killpg": ANY, "signal.pthread_kill": ANY, "socket.connect": ANY, "socket.bind": ANY,
    "socket.sendto": ANY, "socket.getaddrinfo": ANY, "ctypes.dlopen": ANY, "ctypes.dlsym": ANY,
    "ctypes.cdata": ANY, "ctypes.string_at": ANY, "ctypes.addressof": ANY, "ctypes.call_function": ANY,
    "os.truncate": ANY, "os.remove": ANY, "os.rename": ANY, "os.rmdir": ANY, "os.chmod": ANY,
    "os.chown": ANY, "os.link": ANY, "os.symlink": ANY, "shutil.rmtree": ANY, "mmap.__new__": ANY,
    "open": ANY, "import": ANY,
}
CODE_EVENTS = ("exec", "compile", "code.__new__", "function.__new__")
# Modules that exec code they generate themselves: the only ones whose code events under a learner frame pass
GENERATORS = ("dataclasses", "collections", "typing", "enum")
CHECK_EVENT = "donation_lab.check"  # raised by hidden/safe.py's ok() as a check passes
# Event callbacks a library registers on its own behalf (matplotlib's inline backend flushes figures)
LIBRARY_CALLBACKS = ("matplotlib_inline", "matplotlib", "ipywidgets", "IPython", "ipykernel")
BUILTINS = frozenset("""print len isinstance issubclass getattr setattr hasattr type super id repr str int float bool
    list dict tuple set frozenset range sum min max abs all any sorted zip enumerate map filter iter next callable
    compile exec eval open __import__ Exception AssertionError RuntimeError ValueError TypeError""".split())
# File-system events, judged by the path they name (args[0], and args[1] for rename/link/symlink)
PATH_EVENTS = ("os.truncate", "os.remove", "os.rename", "os.rmdir", "os.chmod", "os.chown", "os.link", "os.symlink",
               "shutil.rmtree")
# Modules never imported on a learner's behalf, however indirectly
DANGEROUS = frozenset({"ctypes", "_ctypes", "subprocess", "_posixsubprocess", "socket", "_socket", "pty", "pickle",
                       "_pickle", "marshal", "multiprocessing", "cffi", "dill", "cloudpickle", "shelve"})
# Process events: none may happen once the kernel is up, whoever asks (refused and recorded, whatever is on the
# stack: a library's helper process is as much a process as the learner's)
PROCESSES = ("subprocess.Popen", "os.posix_spawn", "os.exec", "os.fork", "os.forkpty", "os.system", "os.spawn")
WATCHED = ("donation_course.hidden.safe", "donation_course.hidden.exercise", "donation_course.hidden.capstone",
           "donation_course.hidden.debugging", "donation_course.hidden.handover", "donation_course.hidden.lessons",
           "donation_lab.checks")
MAGICS_ALLOWED = ("time", "timeit")


def function_state(f, depth: int = 1) -> tuple:
    """What decides what a function runs: its code, defaults and the objects its closure holds (a closure cell can be
    rebound with no audit event: @check's wrapper holds the check's body so), and theirs for functions it closes
    over."""
    import types

    held = []
    for cell in f.__closure__ or ():
        try:
            held.append(cell.cell_contents)
        except ValueError:  # an empty cell
            held.append(None)
    inner = tuple(function_state(h, depth - 1) for h in held if isinstance(h, types.FunctionType)) if depth else ()
    return (f.__code__, f.__defaults__, f.__kwdefaults__, tuple(held), inner)


def same_state(a, b) -> bool:
    """Two function_state tuples hold the same objects (compared by identity, not by their ==)."""
    return len(a) == len(b) and all(x is y if not isinstance(x, tuple) else
                                    isinstance(y, tuple) and same_state(x, y) for x, y in zip(a, b, strict=True))


def contents(value):
    """A shallow copy of a container global (the same items): filling a table the checks read (safe's originals)
    rebinds nothing, so the snapshot keeps its items too. None for anything else."""
    if type(value) is dict:
        return dict(value)
    if type(value) in (list, set):
        return list(value)
    return None


def same_contents(before, now) -> bool:
    if type(before) is dict:
        return type(now) is dict and before.keys() == now.keys() and all(before[k] is now[k] for k in before)
    now = list(now) if type(now) in (list, set) else None
    return now is not None and len(before) == len(now) and (
        all(x is y for x, y in zip(before, now, strict=True)) or set(map(id, before)) == set(map(id, now)))


def snapshot(modules):
    """{module name: (module, its dict, {global name: value}, {function name: function_state},
    {global name: contents})}."""
    import types

    shot = {}
    for name in WATCHED:  # all imported first: importing one fills tables of another (@check adds to safe.NAMES)
        __import__(name)
    for name in WATCHED:
        mod = modules[name]
        # every global the module binds (functions, modules, and the constants the checks read:
        # capstone.BETA, exercise.LARGE...), not the import machinery's dunders
        values = {k: v for k, v in vars(mod).items() if not (k.startswith("__") and k.endswith("__"))}
        codes = {k: function_state(v) for k, v in values.items() if isinstance(v, types.FunctionType)}
        tables = {k: c for k, v in values.items() if (c := contents(v)) is not None}
        shot[name] = (mod, vars(mod), values, codes, tables)
    return shot


def filled_once(before, now, array_class) -> bool:
    """safe._ARRAY_CLASS: empty at kernel start, filled on first use with JAX's own array class, and only with it."""
    return type(before) is list and not before and type(now) is list and len(now) == 1 and now[0] is array_class



def session_state(shell, sys, builtins, names, libraries):
    """What decides which code a cell runs and where its output and errors go: IPython's
    transformers, hooks and handlers, the kernel's and session's methods, sys's streams, builtins."""
    found = {f"sys.{k}": id(getattr(sys, k)) for k in ("stdout", "stderr", "displayhook")}
    # a `from __future__` feature other than annotations changes how every later cell parses (barry_as_FLUFL)
    found["shell.compile.flags (a __future__ feature)"] = shell.compile.flags & ~0x1000000  # CO_FUTURE_ANNOTATIONS
    found |= {f"builtins.{k}": id(v) for k, v in vars(builtins).items() if k in names}
    for k in ("input_transformers_post", "input_transformers_cleanup", "ast_transformers", "custom_exceptions"):
        found[f"shell.{k}"] = tuple(id(x) for x in getattr(shell, k, ()))
    manager = shell.input_transformer_manager
    for k in ("cleanup_transforms", "line_transforms", "token_transformers"):
        found[f"shell.input_transformer_manager.{k}"] = tuple(id(x) for x in getattr(manager, k, ()))
    for event, callbacks in shell.events.callbacks.items():  # a library's own (matplotlib's flush) may join
        found[f"shell.events.{event}"] = tuple(id(c) for c in callbacks if not str(
            getattr(c, "__module__", "") or "").startswith(libraries))
    for label, obj in (("shell", shell), ("kernel", shell.kernel), ("session", shell.kernel.session),
                       ("transformer manager", manager)):  # a method shadowed on the instance
        found |= {f"{label}.{k}": id(v) for k, v in vars(obj).items()
                  if callable(v) and callable(getattr(type(obj), k, None))}
    return found

