"""Static scan of a submission, before any kernel starts.

Reads every code cell the learner controls (every code cell except the
release's locked and grade cells, whose source nbgrader puts back before it
runs anything), after IPython's own input transformation (so `%magic` and
`!shell` lines are seen as the `get_ipython()` calls they become), with
`ast`, outside the kernel. It flags each construct that can reach the checks,
the interpreter or the machine: a submission that needs none of them loses
nothing, and one that uses them is left to the instructor
(nbgrader's needs_manual_grade) instead of being scored automatically.
"""
import ast
from dataclasses import dataclass

# Names whose mere use reaches the interpreter, the checks or the machine.
NAMES = {
    "get_ipython": "IPython's shell (input transformers, namespaces, magics)",
    "exec": "exec runs code the scan cannot read", "eval": "eval runs code the scan cannot read",
    "compile": "compile builds code the scan cannot read", "__import__": "__import__ imports by name",
    "globals": "globals() reaches the notebook's namespace", "locals": "locals() reaches a namespace",
    "vars": "vars() reaches a module's or object's namespace", "setattr": "setattr changes attributes by name",
    "delattr": "delattr deletes attributes by name", "open": "file-system access (open)",
    "breakpoint": "breakpoint starts a debugger", "input": "input() waits for a person",
    "__builtins__": "the builtins namespace", "memoryview": "raw memory access (memoryview)",
    "display": None,
}
NAMES = {k: v for k, v in NAMES.items() if v}
# Modules a learner's answer never needs: process, file-system, network,
# interpreter and introspection access.
MODULES = {
    "os", "sys", "subprocess", "shutil", "pathlib", "socket", "psutil", "ctypes", "cffi", "inspect", "gc",
    "signal", "importlib", "builtins", "multiprocessing", "threading", "_thread", "concurrent", "asyncio",
    "io", "tempfile", "glob", "fcntl", "mmap", "resource", "pty", "tty", "termios", "code", "codeop",
    "runpy", "site", "sysconfig", "types", "marshal", "pickle", "dill", "cloudpickle", "shelve", "dbm",
    "sqlite3", "urllib", "http", "requests", "ftplib", "smtplib", "ssl", "select", "selectors", "webbrowser",
    "traceback", "linecache", "tracemalloc", "faulthandler", "atexit", "weakref", "pdb", "bdb", "dis",
    "IPython", "ipykernel", "jupyter_client", "zmq", "traitlets", "nbgrader", "nbformat", "nbclient",
    "donation_course", "sqlalchemy", "pty", "platform", "getpass", "pwd", "grp", "ast", "copyreg",
    "posix", "nt", "_io", "_ctypes", "zipimport", "pkgutil", "warnings", "logging", "unittest",
}
# Attribute names that lead to frames, namespaces, the shell or the OS.
ATTRS = {
    "modules", "f_globals", "f_locals", "f_back", "f_builtins", "f_code", "gi_frame", "cr_frame", "ag_frame",
    "tb_frame", "tb_next", "input_transformers_post", "input_transformers_cleanup", "ast_transformers",
    "user_ns", "user_global_ns", "events", "register_magic_function", "run_line_magic", "run_cell_magic",
    "system", "getoutput", "environ", "getsource", "settrace", "setprofile", "kill", "killpg", "popen",
    "fork", "spawn", "exec_module", "load_module", "co_code", "func_globals", "func_code",
}
ALLOWED_DUNDERS = {"__init__", "__call__", "__name__", "__doc__", "__repr__", "__str__", "__len__",
                   "__getitem__", "__iter__", "__next__", "__enter__", "__exit__", "__eq__", "__hash__",
                   "__add__", "__radd__", "__mul__", "__rmul__", "__sub__", "__rsub__", "__neg__"}


@dataclass
class Flag:
    notebook: str
    cell: str
    line: int
    reason: str

    def __str__(self):
        return f"{self.notebook}/{self.cell} line {self.line}: {self.reason}"


def _transform(source: str) -> str:
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager().transform_cell(source)


class _Visitor(ast.NodeVisitor):
    def __init__(self):
        self.found = []

    def flag(self, node, reason):
        self.found.append((getattr(node, "lineno", 0), reason))

    def visit_Name(self, node):
        if node.id in NAMES:
            self.flag(node, f"{node.id}: {NAMES[node.id]}")
        elif node.id in MODULES and isinstance(node.ctx, ast.Load) and False:
            pass
        self.generic_visit(node)

    def _module(self, node, name):
        top = (name or "").split(".")[0]
        if top in MODULES:
            self.flag(node, f"imports {name} (process, file-system, network or interpreter access)")

    def visit_Import(self, node):
        for alias in node.names:
            self._module(node, alias.name)

    def visit_ImportFrom(self, node):
        if node.level:
            self.flag(node, "relative import")
        self._module(node, node.module)
        for alias in node.names:
            if alias.name == "*":
                self.flag(node, f"from {node.module} import * (hides which names it binds)")
            self._module(node, alias.name if node.module in ("donation_lab",) else "")

    def visit_Attribute(self, node):
        name = node.attr
        if name.startswith("__") and name.endswith("__") and name not in ALLOWED_DUNDERS:
            self.flag(node, f"dunder attribute .{name} (reaches an object's internals)")
        elif name.startswith("_") and not name.startswith("__"):
            self.flag(node, f"private attribute .{name}")
        elif name in ATTRS:
            self.flag(node, f"attribute .{name} (reaches the interpreter, the shell or the machine)")
        if isinstance(node.ctx, (ast.Store, ast.Del)) and not (
                isinstance(node.value, ast.Name) and node.value.id == "self"):
            self.flag(node, f"{'assigns' if isinstance(node.ctx, ast.Store) else 'deletes'} attribute "
                      f"{ast.unparse(node)} (changes a module, class or shared object)")
        self.generic_visit(node)

    def visit_Call(self, node):
        # getattr/hasattr with a computed or dunder name: attribute access the scan cannot read
        if isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2:
            attr = node.args[1]
            if not (isinstance(attr, ast.Constant) and isinstance(attr.value, str)) or (
                    attr.value.startswith("_") or attr.value in ATTRS):
                self.flag(node, f"{node.func.id} with a computed or private attribute name")
        self.generic_visit(node)

    def visit_Global(self, node):
        self.generic_visit(node)


def scan_source(source: str) -> list:
    """[(line, reason)] for one cell's source ([] when it does not parse: the
    kernel then raises the SyntaxError itself, and runs nothing of the cell)."""
    try:
        tree = ast.parse(_transform(source))
    except (SyntaxError, ValueError):
        return []
    v = _Visitor()
    v.visit(tree)
    return sorted(set(v.found))


def trusted_ids(release_nb) -> set:
    """grade_ids whose source nbgrader restores from the release (locked and grade cells)."""
    ids = set()
    for cell in (release_nb.cells if release_nb is not None else []):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade_id") and (meta.get("locked") or meta.get("grade")) and not meta.get("solution"):
            ids.add(meta["grade_id"])
    return ids


def _text(cell) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def scan_notebook(nb, name: str, release_nb=None) -> list:
    """Flags for every learner-controlled code cell of `nb`: a cell whose
    source is exactly one of the release's code cells (the lessons' own
    teaching code, left as handed out) is the course's code, not the learner's."""
    trusted, flags = trusted_ids(release_nb), []
    released = {_text(c).strip() for c in (release_nb.cells if release_nb is not None else [])
                if c.get("cell_type") == "code"}
    seen = set()
    for i, cell in enumerate(nb.cells):
        if cell.get("cell_type") != "code":
            continue
        meta = cell.get("metadata", {}).get("nbgrader", {})
        gid = meta.get("grade_id")
        if gid in trusted and gid not in seen and (meta.get("locked") or meta.get("grade")):
            seen.add(gid)  # nbgrader puts the release's source back into this one
            continue
        source = _text(cell)
        if source.strip() in released:
            continue
        for line, reason in scan_source(source):
            flags.append(Flag(name, gid or cell.get("id") or f"cell {i + 1}", line, reason))
    return flags
