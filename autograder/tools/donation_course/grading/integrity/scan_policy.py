"""The scan's policy as data: what a learner's code may use (modules, dunders, magics, `__future__` features) and
the names it may never reach, each with the reason a flag shows. The rules that apply it are scan.py's _Visitor
(rules 1-7); change what is allowed here, how it is checked there."""
import re

FUTURES = {"annotations"}  # the only `from __future__` feature an answer may turn on (others change the language)
ALLOWED_MODULES = {"jax", "numpy", "functools", "math", "typing", "dataclasses", "collections", "itertools",
                   "warnings", "time", "matplotlib", "donation_lab", "__future__"}
ALLOWED_DEFS = set("__init__ __post_init__ __call__ __repr__ __str__ __len__ __getitem__ __iter__ __next__ "
                   "__contains__ __enter__ __exit__ __eq__ __hash__".split())
ALLOWED_DUNDERS = ALLOWED_DEFS | {"__name__", "__doc__", "__version__", "__slots__", "__main__"}
MAGICS, MAGIC_OPTIONS = {"time", "timeit"}, re.compile(r"\s*(?:(?:-[tcqo]+|-[nrp]\s*\d+|--no-raise-error)(?:\s+|$))*")
MODULE_NAMES = {"np", "jnp", "jax", "lax", "functools", "checks", "plt", "warnings", "math"}  # + what `import` binds
DENIED_MODULES = set("""builtins sys os posix nt importlib subprocess ctypes ctypeslib cffi inspect gc types io
    pathlib shutil tempfile glob fileinput codecs gzip zipfile socket urllib http signal threading multiprocessing
    concurrent asyncio atexit traceback linecache weakref operator string pickle marshal shelve dill cloudpickle
    copyreg runpy code codeop site sysconfig ast dis logging argparse psutil mmap pdb bdb IPython ipykernel
    nbgrader donation_course f2py distutils extbuild timeit""".split())  # held by allowed modules (np.os), or worse
_why = lambda names, why: {n: why.format(n) for n in names.split()}  # noqa: E731
DENIED_ATTRS = {  # names never read (as attributes, through getattr, imported, in strings), whatever they are read from
    **_why("""modules f_globals f_locals f_back f_builtins f_code f_trace gi_frame gi_code cr_frame cr_code ag_frame
        ag_code tb_frame tb_next co_code func_globals func_code""", "frames, code or module table"),
    **_why("system getoutput environ getsource settrace setprofile kill killpg popen fork spawn exec_module "
           "load_module", "reaches the process or the machine"),
    **_why("""attrgetter methodcaller Formatter get_field vformat get_type_hints ForwardRef update_wrapper register
        switch_backend getp setp runstring rundocs decorate_methods getattr hasattr setattr delattr vars globals
        locals dir exec eval breakpoint backend rc_file register_dataclass make_dataclass get_ipython bltns
        stdlib_re __import__ input_transformers_post ast_transformers set_custom_exc user_ns run_cell""",
           "reflective access ({}: names or code given as data)"),
    **_why("""load loads read_array open_memmap memmap fromfile loadtxt genfromtxt read_pickle NpzFile DataSource
        Unpickler deserialize deserialize_and_load serialize_executable allow_pickle""",
           "a loader that reads files or pickles (a pickle runs code)"),
    **_why("""save savez savez_compressed savetxt tofile dump dumps savefig imsave write_text write_bytes read_text
        read_bytes open tempdir temppath as_strided json_dump""",
           "file-system or raw-memory access (writes and reads files)"),
    **_why("""FFMpegWriter FFMpegFileWriter ImageMagickWriter ImageMagickFileWriter to_html5_video ffmpeg_path
        convert_path writers""", "starts a process ({}: matplotlib's animation writers run a program)"),
}
DENIED_NAMES = {  # builtins never named (getattr/hasattr: only called directly, see visit_Call)
    **_why("setattr delattr", "reflective access: {}() changes attributes by name"),
    **_why("vars globals locals dir", "reflective access: {}() reaches a namespace"),
    **_why("exec eval compile", "{}() runs code the scan cannot read"), **_why("exit quit", "{}() ends the kernel"),
    "__import__": "__import__ imports by name", "help": "help() imports modules by name", "input": "input() waits",
    "get_ipython": "IPython's shell (get_ipython): only %time and %timeit are allowed", "memoryview": "raw memory",
    "breakpoint": "breakpoint starts a debugger", "open": "file-system access (open)"}
GRADER_STRINGS = {  # text in a string that only the grader's own code writes
    "donation-lab.handover": "the grader's hand-over output type: only its checks hand answers to the referee"}
GUARDED = {"testing": "numpy.testing only through its assert_*", "wraps": "only @wraps(f) on a def: it sets attributes"}
