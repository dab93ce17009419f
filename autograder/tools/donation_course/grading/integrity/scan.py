"""Static scan of a submission before any kernel starts: a policy (what a learner's code MAY use), not a blocklist.
Reads each learner-controlled code cell (not the release's locked and grade cells: nbgrader restores those) as the
kernel runs it (IPython's transformation and automagic: `!ls`, `%env`, `system id` are `get_ipython()` calls) and
flags what the policy (its data in scan_policy.py, rules 1-7 in _Visitor) does not allow: the instructor grades
those by hand.
Cells are parsed in the order the kernel runs them, with the `from __future__` flags earlier cells set (IPython's
compiler keeps them for later cells). A cell the scan cannot parse is not read: `read_notebook` names it, and the
runtime audit flags the submission if it runs all the same (audit_log.kernel_flags: every cell that runs must be one
the scan read or the course's own)."""
import __future__

import ast
import functools
import importlib.util
import re
from dataclasses import dataclass

from nbgrader.utils import is_grade, is_locked

from ...course import grade_id
from .scan_policy import (
    ALLOWED_DEFS,
    ALLOWED_DUNDERS,
    ALLOWED_MODULES,
    DENIED_ATTRS,
    DENIED_MODULES,
    DENIED_NAMES,
    FUTURES,
    GRADER_STRINGS,
    GUARDED,
    MAGIC_OPTIONS,
    MAGICS,
    MODULE_NAMES,
)

REFLECTIVE, FORMATS, FUNCS = ("getattr", "hasattr"), ("format", "format_map"), (ast.FunctionDef, ast.AsyncFunctionDef)
_dunder = lambda name: len(name) > 4 and name.startswith("__") and name.endswith("__")  # noqa: E731
_str = lambda node: isinstance(node, ast.Constant) and isinstance(node.value, str)  # noqa: E731
_text = lambda cell: "".join(s) if isinstance(s := cell.get("source", ""), list) else s  # noqa: E731
_gid = lambda cell: ((cell.get("metadata") or {}).get("nbgrader") or {}).get("grade_id")  # noqa: E731  (any flags)


@dataclass
class Flag:
    notebook: str
    cell: str
    line: int
    reason: str

    def __str__(self):
        return f"{self.notebook}/{self.cell} line {self.line}: {self.reason}"


def name_problem(name: str):  # the rule (2-5) `name` breaks when it is used to reach an attribute, or None
    if _dunder(name):
        return None if name in ALLOWED_DUNDERS else "dunder attribute (reaches an object's internals)"
    if name.startswith("_") and name.strip("_"):
        return "private attribute"
    return "module outside the allowlist" if name in DENIED_MODULES else DENIED_ATTRS.get(name)


def _missing(top: str) -> bool:  # the grading interpreter cannot find it: importing it only raises
    try:
        return top not in DENIED_MODULES and importlib.util.find_spec(top) is None
    except (ImportError, ValueError):
        return False


def _context(trees) -> tuple:  # a notebook's (names bound to modules, class names, instance method names)
    modules, classes, methods = set(MODULE_NAMES), set(), set()
    for node in (n for tree in trees for n in ast.walk(tree)):
        if isinstance(node, ast.Import):
            modules |= {a.asname or a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ClassDef):
            classes.add(node.name)
            methods |= {f.name for f in node.body if isinstance(f, FUNCS)}
    return modules, classes, methods


class _Visitor(ast.NodeVisitor):
    """1 imports from ALLOWED_MODULES (numpy.testing: assert_*) or of a module the grader cannot find (a typo: it only
    raises, since no file can be written), none starred or relative; 2 no private or dunder name, attribute or name-
    like string beyond ALLOWED_DUNDERS, ALLOWED_DEFS; 3 no module outside the allowlist as an attribute, no module as
    a value; 4 no reflection (DENIED_NAMES, DENIED_ATTRS, GUARDED; getattr/hasattr only with a constant public name;
    format fields obey 2-3); 5 no loader, no file access (DENIED_ATTRS); 6 attributes assigned only on a method's own
    self, no learner's method called through its class; 7 IPython: only %time and %timeit, whose code obeys these."""
    def __init__(self, context):
        self.context, (self.modules, self.classes, self.methods) = context, context
        self.found, self.receivers, self.ok, self.skip, self.defs = [], set(), set(), set(), []
        self.flag = lambda node, reason: self.found.append((getattr(node, "lineno", 0), reason))

    def _reach(self, node, obj, name, how):  # rules 2-6 for reading `name` from `obj`
        problem = name_problem(name) or id(node) not in self.ok and GUARDED.get(name)
        if problem:
            self.flag(node, f"{how}: {problem}")
        if name in self.methods and (getattr(obj, "id", None) in self.classes  # A.f or type(a).f: a method whose
                                     or getattr(getattr(obj, "func", None), "id", "") == "type"):  # self is anything
            self.flag(node, f"{ast.unparse(obj)}.{name}: a method called through its class (self could be any object)")

    def _bound(self, node, name):
        if name and (name.startswith("_dl") or _dunder(name) and name not in ALLOWED_DUNDERS):
            self.flag(node, f"{name}: private or dunder name (the course's or the interpreter's)")

    def _module(self, node, name, asname=None):  # rule 1; `from m import n` imports m.n, bound as n
        top, *rest = name.split(".")
        bad = next((p for p in rest if name_problem(p)), None)
        self._bound(node, asname)
        if rest[-1:] == ["*"]:
            self.flag(node, f"from {name[:-2]} import * (star import: hides which names it binds)")
        elif top in ALLOWED_MODULES and bad or top not in ALLOWED_MODULES and not _missing(top):
            self.flag(node, f"imports {name} ({name_problem(bad) if bad else 'import outside the allowlist'})")
        elif "testing" in rest and asname and not rest[-1].startswith("assert_"):
            self.flag(node, f"imports {name} (numpy.testing: only its assert_* functions, by their names)")

    visit_Import = lambda self, node: [self._module(node, a.name, a.asname) for a in node.names]  # noqa: E731

    def visit_ImportFrom(self, node):
        if node.level or not node.module:
            return self.flag(node, "relative import (import outside the allowlist)")
        if node.module == "__future__":
            for alias in node.names:
                if alias.name not in FUTURES:
                    self.flag(node, f"from __future__ import {alias.name} (only annotations: a future feature "
                                    "changes how later cells parse and run)")
        self._module(node, node.module)
        for alias in node.names:
            self._module(node, f"{node.module}.{alias.name}", alias.asname or alias.name)

    def visit_Name(self, node):
        n = node.id
        if n in REFLECTIVE:  # a direct call never gets here: visit_Call does not visit its func
            self.flag(node, f"reflective access: {n} used as a value (only {n}(obj, 'public_name') is allowed)")
        elif n in DENIED_NAMES:
            self.flag(node, DENIED_NAMES[n])
        elif n in self.modules | self.classes and isinstance(node.ctx, ast.Load) and id(node) not in self.receivers:
            self.flag(node, f"{n} used as a value (a module or a learner's class: only its attributes, or a call)")
        elif n in GUARDED and id(node) not in self.ok:
            self.flag(node, f"{n}: {GUARDED[n]}")
        elif n == "self" and not isinstance(node.ctx, ast.Load):
            self.flag(node, "rebinds self (attributes are assigned only on a method's own self)")
        self._bound(node, n)

    def visit_Attribute(self, node):
        self.receivers.add(id(node.value))
        if node.attr.startswith("assert_"):
            self.ok.add(id(node.value))
        self._reach(node, node.value, node.attr, f".{node.attr}")
        if node.attr in FORMATS and id(node) not in self.ok:
            self._format(node, node.value)
        if not isinstance(node.ctx, ast.Load) and (getattr(node.value, "id", "") != "self" or self.defs[-1:] != [1]):
            verb = "assigns" if isinstance(node.ctx, ast.Store) else "deletes"
            self.flag(node, f"{verb} attribute {ast.unparse(node)} (attribute assignment outside a method's self)")
        self.generic_visit(node)

    def _format(self, node, template):
        if not _str(template):
            return self.flag(node, "format with a computed template (a format string reads attributes)")
        fields = re.findall(r"\{((?:[^{}:!\[]|\[[^\]]*\])*)", template.value)  # those nested in format specs too
        for key in (k for field in fields for _, k in re.findall(r"(\.|\[)([^.\[\]]*)", field)):
            if name_problem(key):
                self.flag(node, f"format string reads {key}: {name_problem(key)}")

    def visit_Constant(self, node):  # a string that names what rules 2-5 forbid is a name waiting to be used
        s, parts = node.value, str(node.value).split(".")
        bad = next((p for p in parts if name_problem(p)), None) if all(p.isidentifier() for p in parts) else None
        if isinstance(s, str) and id(node) not in self.skip and (bad or "module://" in s):
            self.flag(node, f"string {s!r} names {bad}: {name_problem(bad)}" if bad else f"string {s!r}: an import")
        for text, why in GRADER_STRINGS.items():
            if isinstance(s, str) and text in s:
                self.flag(node, f"a string with {text!r}: {why}")

    def visit_MatchClass(self, node):  # `case C(attr=...)` reads attributes by name
        self.receivers.add(id(node.cls))
        for name in node.kwd_attrs:
            self._reach(node, None, name, f"match pattern reads .{name}")
        self.generic_visit(node)

    def visit_ClassDef(self, node):  # rule 6: `self.x = ...` only in a method whose first parameter is self
        self.ok |= {id(f) for f in node.body if isinstance(f, FUNCS) and f.args.args and f.args.args[0].arg == "self"}
        self.receivers |= {id(base) for base in node.bases}  # a learner's class may be subclassed
        self.generic_visit(node)

    def visit_FunctionDef(self, node):
        if _dunder(getattr(node, "name", "")) and node.name not in ALLOWED_DEFS:
            self.flag(node, f"defines {node.name} (a class may define only {', '.join(sorted(ALLOWED_DEFS))})")
        self.ok |= {id(d.func) for d in getattr(node, "decorator_list", ()) if isinstance(d, ast.Call) and  # @wraps(f)
                    len(d.args) == 1 and not d.keywords and ast.unparse(d.func).split(".")[-1] == "wraps"}
        self.defs.append(int(id(node) in self.ok))
        self.generic_visit(node)
        self.defs.pop()

    visit_AsyncFunctionDef = visit_Lambda = visit_FunctionDef

    def visit_Call(self, node):
        f, args, callee = node.func, node.args, getattr(node.func, "attr", getattr(node.func, "id", ""))
        self.receivers |= {id(f), *(map(id, args) if callee in ("isinstance", "issubclass", "super") else ())}
        if self._magic(node):
            return
        if isinstance(f, ast.Name) and f.id in REFLECTIVE:
            name = args[1] if len(args) >= 2 else None
            if node.keywords or len(args) > 3 or any(isinstance(a, ast.Starred) for a in args) or not _str(name):
                self.flag(node, f"reflective access: {f.id} with a computed name")
            else:
                self.skip.add(id(name))
                self._reach(node, args[0], name.value, f"reflective access: {f.id}(..., {name.value!r})")
            self.receivers.add(id(args[0]) if args else None)
            return [self.visit(child) for child in [*args, *node.keywords]] and None
        if getattr(f, "id", "") == "type" and len(args) != 1 or getattr(getattr(f, "func", None), "id", "") == "type":
            self.flag(node, "type() with three arguments or type(...)(...) (reflective: builds or calls a class)")
        if isinstance(f, ast.Attribute) and f.attr in FORMATS and getattr(f.value, "id", "") == "str":
            self.ok.add(id(f))
            self._format(node, args[0] if args else None)
        for k in node.keywords:
            if k.arg == "allow_pickle" and not (isinstance(k.value, ast.Constant) and k.value.value is False):
                self.flag(k.value, "allow_pickle: a loader that runs code (a pickle runs code)")
            self._bound(k.value, k.arg)
        self.generic_visit(node)

    def _magic(self, node) -> bool:  # %timeit, %%timeit, %time: get_ipython().run_line_magic('timeit', CODE)...
        f, args = node.func, node.args
        shell = getattr(f, "value", None)
        if not (getattr(f, "attr", "") in ("run_line_magic", "run_cell_magic") and isinstance(shell, ast.Call)
                and getattr(shell.func, "id", "") == "get_ipython" and not (shell.args or shell.keywords)
                and not node.keywords and len(args) == (2 if f.attr == "run_line_magic" else 3) and all(map(_str, args))
                and args[0].value in MAGICS):
            return False
        for i, arg in enumerate(args[1:]):
            code = arg.value[MAGIC_OPTIONS.match(arg.value).end():] if i == 0 else arg.value
            if _parse(code) is None:
                self.flag(node, f"%{args[0].value} with code the scan cannot read")
            for _, reason in scan_source(code, self.context):
                self.flag(node, f"%{args[0].value}: {reason}")
        return True


@functools.cache
def _magic_words() -> frozenset:  # a grading kernel's line magics and aliases: what automagic calls by name
    from IPython.core import magics
    from IPython.core.alias import default_aliases
    found = {w for n in dir(magics) for w in getattr(getattr(magics, n), "magics", {}).get("line", ())}
    return frozenset(found | {a for a, _ in default_aliases()} | set("autosave clear connect_info edit less man more "
                                                                     "qtconsole subshell store".split()))  # ipykernel's


def _parse(source: str, future: int = 0):
    """The cell as the kernel runs it (for one line, automagic too: `system id` is %system, `timeit(f)` %timeit),
    parsed with the compiler flags `future` that earlier cells' `from __future__` imports set, as IPython does."""
    try:
        return _parse_or_raise(source, future)
    except (SyntaxError, ValueError):
        return None


def _parse_or_raise(source: str, future: int = 0):
    from IPython.core.inputtransformer2 import TransformerManager
    from IPython.core.splitinput import LineInfo
    cell = TransformerManager().transform_cell(source)
    info = LineInfo(cell.strip())
    if len(cell.splitlines()) == 1 and info.ifun in _magic_words() and info.the_rest[:1] not in ("=", ","):
        cell = f"get_ipython().run_line_magic({info.ifun!r}, {info.the_rest!r})\n"
    return compile(cell, "<cell>", "exec", ast.PyCF_ONLY_AST | future, dont_inherit=True)


def future_flags(tree) -> int:
    """The compiler flags a cell's `from __future__` imports turn on for the cells after it (IPython compiles each
    top-level statement on its own and keeps the flags; any statement of the cell may hold one)."""
    flags = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "__future__" and not node.level:
            flags |= sum(getattr(getattr(__future__, a.name, None), "compiler_flag", 0) for a in node.names)
    return flags


def scan_source(source: str, context=None, future: int = 0) -> list:
    """[(line, reason)] for a cell ([] if it does not parse: read_notebook names it as a cell the scan did not read,
    which the audit flags if the kernel runs it)."""
    tree = _parse(source, future)
    if tree is None:
        return []
    v = _Visitor(context or _context([tree]))
    v.visit(tree)
    return sorted(set(v.found))


def trusted_ids(release_nb) -> set:
    """grade_ids whose source nbgrader restores from the release (locked and grade cells)."""
    return {grade_id(c) for c in (release_nb.cells if release_nb is not None else []) if is_locked(c)} - {None}


@dataclass(frozen=True)
class ScanResult:
    """What the scan found in one notebook: its flags, the digests (audit_log.parsed_digests) of every cell text it
    read, and {digest: why} for each learner cell it could not parse (flagged if the kernel runs it after all)."""
    flags: list
    read: frozenset
    unread: dict


def read_notebook(nb, name: str, release_nb=None) -> ScanResult:
    """Scan every learner-controlled cell of `nb` run as code (a code cell, or one with a release code cell's
    grade_id, whatever its type and flags: nbgrader makes it code again); a release code cell's text is the course's.
    Cells are parsed in order with the `from __future__` flags the cells before them set."""
    from .audit_log import parsed_digests

    trusted, flags, seen, read, unread = trusted_ids(release_nb), [], set(), set(), {}
    release = [c for c in (release_nb.cells if release_nb is not None else []) if c.get("cell_type") == "code"]
    released, coded = {_text(c).strip() for c in release}, {_gid(c) for c in release} - {None}
    runs = [(i, c) for i, c in enumerate(nb.cells) if c.get("cell_type") == "code" or _gid(c) in coded]
    trees, future = {}, 0
    for i, cell in runs:  # in the kernel's order: each cell parses with the flags of the cells before it
        try:
            trees[i] = _parse_or_raise(_text(cell), future)
            future |= future_flags(trees[i])
        except (SyntaxError, ValueError) as exc:
            trees[i] = exc
    context = _context([t for t in [*trees.values(), *(_parse(_text(c)) for c in release)] if isinstance(t, ast.AST)])
    for i, cell in runs:
        gid, text = grade_id(cell), _text(cell)
        where = gid or cell.get("id") or f"cell {i + 1}"
        if gid in trusted and gid not in seen and (is_locked(cell) or is_grade(cell)):
            seen.add(gid)  # nbgrader puts the release's source back into this one
            continue
        if text.strip() in released:  # the course's code (audit_log.trusted_cells), whitespace aside
            read |= parsed_digests(text)
            continue
        tree = trees[i]
        if not isinstance(tree, ast.AST):
            why = f"the scan cannot parse this cell ({type(tree).__name__}: {getattr(tree, 'msg', tree)}), " \
                  "yet the kernel ran it"
            unread.update({d: Flag(name, where, getattr(tree, "lineno", 0) or 0, why) for d in parsed_digests(text)})
            continue
        v = _Visitor(context)
        v.visit(tree)
        flags += [Flag(name, where, line, reason) for line, reason in sorted(set(v.found))]
        read |= parsed_digests(text)
    return ScanResult(flags, frozenset(read), unread)


def scan_notebook(nb, name: str, release_nb=None) -> list:
    """The flags of read_notebook."""
    return read_notebook(nb, name, release_nb).flags
