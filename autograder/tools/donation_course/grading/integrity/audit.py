"""The grading kernel's runtime audit: a PEP 578 hook installed before any
learner code runs, which no code can remove.

`python -m donation_course.grading.integrity.audit --audit-fd N --config-fd M -- ARGS`
(kernel.py starts every grading kernel so) reads its configuration from
fd M (a one-time pipe: the record key, the hashes of the course's own
cells, the modules a learner may import), snapshots the hidden checks and
the learner-facing `donation_lab.checks`, installs the hook, and starts
ipykernel with ARGS. The hook writes one line per record to fd N, an
append-only file outside the sandbox, each line signed with the key
(HMAC-SHA256), which never leaves the hook's closure:

- `cell`: a notebook cell starts (by the hash ipykernel names it with);
  before it starts, the hidden checks and `checks` are compared with the
  snapshot, and a `tamper` record names whatever was replaced;
- `run`: a cell that is not the course's runs, with the SHA-256 of the text
  IPython parsed: the grader flags any the static scan did not read (one it
  could not parse, or one sent by another process over the connection file);
- `event`: an audit event caused by learner code, with the cell and line;
  and every process start once the kernel is up, whatever is on the stack,
  which is refused (PermissionError) as well as recorded;
- `end`: the grader's last cell ran. Its text holds a per-kernel random token
  that only the grader knows (the configuration holds only its digests), so
  no learner cell can end the audit early.

Learner code is a notebook cell whose source is not the course's own (the
release's cells, the source's grade cells: `trusted`), or a function it
defined. Library code raises the same events (dataclasses and namedtuple
call exec, jax reads code objects), so each rule says which frames count:
DIRECT rules need a learner frame as the event's immediate caller, ANY
rules a learner frame anywhere on the stack. audit_log.py reads the records.
"""
import sys

from .audit_policy import (
    BUILTINS,
    CHECK_EVENT,
    CODE_EVENTS,
    DANGEROUS,
    DIRECT,
    GENERATORS,
    LIBRARY_CALLBACKS,
    MAGICS_ALLOWED,
    PATH_EVENTS,
    PROCESSES,
    RULES,
    filled_once,
    function_state,
    same_contents,
    same_state,
    session_state,
    snapshot,
)

END_ENV = "DONATION_LAB_AUDIT_END"  # the grader's per-notebook token, read by the launcher outside the sandbox


def end_source(token: str) -> str:
    """The grader's last cell (audit_log.MarkNotebookEnd): its text holds the token, so only the grader can write it."""
    return f"# the grader's audit: end of notebook {token}\npass"


def end_digests(token: str) -> list:
    """SHA-256 of the texts IPython may parse for end_source(token) (as audit_log.parsed_digests, without IPython)."""
    import hashlib

    text = end_source(token)
    return sorted({hashlib.sha256(t.encode()).hexdigest() for t in (text, text + "\n", text + "\n\n")})


def install(fd: int, key: bytes, trusted: frozenset, allowed: frozenset, workdir: str,
            ends: frozenset = frozenset()) -> None:
    import builtins
    import hashlib
    import hmac
    import json
    import os
    import re
    from importlib.machinery import PathFinder

    # the policy, bound into this closure: rebinding audit_policy's globals later changes nothing here
    rules, direct, code_events, generators, check_event = dict(RULES), DIRECT, CODE_EVENTS, GENERATORS, CHECK_EVENT
    path_events, dangerous, processes, magics_allowed = PATH_EVENTS, DANGEROUS, PROCESSES, MAGICS_ALLOWED
    fingerprint, same, same_table, first_fill = function_state, same_state, same_contents, filled_once
    take_state, names, libraries, the_sys = session_state, BUILTINS, LIBRARY_CALLBACKS, sys

    def state_of(shell):
        return take_state(shell, the_sys, builtins, names, libraries)

    write, getframe, modules, realpath, islink = os.write, sys._getframe, sys.modules, os.path.realpath, os.path.islink
    folders = {}  # folder -> its realpath (resolved)
    find_spec = PathFinder.find_spec
    sign, sha256, dumps = hmac.new, hashlib.sha256, json.dumps
    cell_name = re.compile(r"/ipykernel_\d+/(\d+)\.py$").search
    shot = snapshot(modules)
    array_class = modules["jax._src.array"].ArrayImpl  # what safe._ARRAY_CLASS is filled with on first use
    trusted = trusted | ends
    checks_module = shot["donation_lab.checks"][0]
    ok_code = shot["donation_course.hidden.safe"][3]["ok"][0]
    run_code = shot["donation_course.hidden.exercise"][2]["check_values"].__code__  # @check's wrapper
    state = {"busy": False, "seq": 0, "cell": "", "user_ns": None, "shell": None, "session": None}
    trusted_files = set()  # cells whose source, as IPython parsed it, is exactly one of the course's
    digests, ran = {}, set()  # cell file -> SHA-256 of the text parsed; (file, digest) of the cells recorded as run
    writable = (realpath(workdir), "/tmp", "/dev/null")
    installed = tuple(sorted({realpath(p) + "/" for p in (sys.prefix, sys.base_prefix, *(
        os.path.dirname(os.path.dirname(modules[m].__file__)) for m in ("donation_lab.checks",
                                                                         "donation_course.hidden.safe")))}))

    def record(kind, **fields):
        state["seq"] += 1
        line = dumps({"seq": state["seq"], "kind": kind, **fields}, sort_keys=True)
        try:
            write(fd, (line + "\t" + sign(key, line.encode(), sha256).hexdigest() + "\n").encode())
        except OSError:
            pass  # the channel was closed: the missing records say so

    def learner(frame):
        """(cell hash, line) if `frame` runs learner code, else None."""
        found = cell_name(frame.f_code.co_filename)
        if found and frame.f_code.co_filename not in trusted_files:
            return found.group(1), frame.f_lineno
        return None

    def on_parse(args, frame):
        """IPython parses a cell (its compile to an AST, no learner code running): trusted if its
        text is exactly one of the course's cells (by SHA-256; the cell's name is a 32-bit hash)."""
        source, filename = args[0], str(args[1])
        if isinstance(source, (str, bytes)) and cell_name(filename) and frame.f_code.co_name == "ast_parse":
            f = frame
            while f is not None and not learner(f):
                f = f.f_back
            text = source if isinstance(source, bytes) else source.encode()
            digests[filename] = digest = sha256(text).hexdigest() if f is None else ""
            if f is None and digest in trusted:
                trusted_files.add(filename)
            else:
                trusted_files.discard(filename)
            if state["shell"] is not None:  # every cell but the first: compare before it runs
                cell_starts(filename)

    def tampered():
        out = []
        for name, (mod, namespace, values, codes, tables) in shot.items():
            if modules.get(name) is not mod:
                out.append(name)
            out += [f"{name}.{k}" for k, v in values.items() if namespace.get(k) is not v]
            out += [f"{name}.{k} (code or closure)" for k, was in codes.items()
                    if not same(fingerprint(values[k]), was)]
            out += [f"{name}.{k} (contents)" for k, was in tables.items()
                    if not same_table(was, values[k]) and not first_fill(was, values[k], array_class)]
        user_ns = state["user_ns"]
        if user_ns is not None and "checks" in user_ns and user_ns["checks"] is not checks_module:
            out.append("checks (the notebook's name for donation_lab.checks)")
        if state["session"] is not None:
            now = state_of(state["shell"])
            out += [f"{k} (the kernel's)" for k, v in state["session"].items() if now.get(k) != v]
            out += [f"{k} (the kernel's, added)" for k in now.keys() - state["session"].keys()]
        return out

    def on_cell(code, frame):
        """A notebook cell's code starts: check the snapshot first."""
        found = cell_name(code.co_filename)
        if not found or frame is None:
            return
        name = code.co_filename
        if name not in trusted_files and (name, digests.get(name, "")) not in ran:
            ran.add((name, digests.get(name, "")))  # once per text: a cell runs one exec per statement
            record("run", cell=found.group(1), sha=digests.get(name, ""))
        elif name in trusted_files and digests.get(name) in ends and (name, "end") not in ran:
            ran.add((name, "end"))
            record("end", cell=found.group(1), sha=digests[name])
        if state["user_ns"] is None and frame.f_code.co_name == "run_code":
            shell = frame.f_locals["self"]  # the first cell: no learner code has run
            state["user_ns"], state["shell"], state["session"] = shell.user_ns, shell, state_of(shell)
        cell_starts(code.co_filename)

    def cell_starts(filename):
        """A cell is parsed or starts running: compare the snapshot once per cell."""
        found = cell_name(filename)
        if found and found.group(1) != state["cell"]:
            state["cell"] = found.group(1)
            changed = tampered()
            if changed:
                record("tamper", cell=found.group(1), what=changed[:20])
            record("cell", cell=found.group(1))

    def outside(path):
        if isinstance(path, int):
            return path == fd  # a file descriptor: only the channel's own is guarded
        return not realpath(os.fsdecode(path)).startswith(writable)

    def judge(event, args, frame):
        rule, caller = rules[event], learner(frame)
        if event == "exec" and args and hasattr(args[0], "co_filename"):
            on_cell(args[0], frame)
        if event == "compile" and len(args) > 1:
            on_parse(args, frame)
        if rule == direct and event not in code_events:
            detail = f" {args[1]}" if len(args) > 1 and isinstance(args[1], str) else ""
            return (caller, event + detail) if caller else None
        if event in path_events and not any(outside(a) for a in args[:2] if isinstance(a, (str, bytes, int))):
            return None
        if event.startswith("marshal.") and frame.f_code.co_filename.startswith("<frozen importlib"):
            return None  # an import reading a module's compiled code
        if caller is None and settled_here(event, args, frame):
            return None
        outer, f = caller, frame
        while outer is None and f is not None:
            outer, f = learner(f), f.f_back
        if outer is None:
            return None
        module = frame.f_globals.get("__name__", "")
        if event == "import":
            top, importer = str(args[0]).split(".")[0], importer_of(frame)
            if top in dangerous or (importer is not None and learner(importer) and top not in allowed
                                    and (top in modules or find_spec(top) is not None)):
                return outer, f"imports {args[0]}"
            return None  # (a module that does not exist only raises ModuleNotFoundError)
        if event == "open":
            path, mode = args[0], str(args[1] or "r")
            if isinstance(path, int):
                return None
            given = os.fsdecode(path)
            text = realpath(given)
            if any(re.match(r"/proc/[^/]+/(fd|mem|environ|map_files)", p) for p in (given, text)):
                return outer, f"opens {given}"
            if any(c in mode for c in "wax+") and not text.startswith(writable):
                return outer, f"writes {text}"
            return None
        if event in code_events:
            entry = entry_frame(frame)
            if entry.f_globals.get("__name__", "").startswith(("IPython", "ipykernel")):  # the learner called IPython
                if entry.f_code.co_name in ("run_line_magic", "run_cell_magic") and \
                        entry.f_locals.get("magic_name") in magics_allowed:
                    return None  # %time and %timeit compile the statement the scan read
            elif caller is None and module.split(".")[0] in generators:
                return None  # dataclasses, namedtuple... exec code they wrote themselves
            elif caller is None and event == "compile" and module == "ast":
                return None  # ast.parse: a tree, not code (compiling the tree is an event of its own)
            elif caller is None and (module.startswith("importlib") or frame.f_code.co_filename.startswith(
                    "<frozen importlib")) and library_code(event, args):
                return None  # an import runs a module's code, from a file no submission can write
            return outer, f"{event} of code built at run time" + (f" (in {module})" if caller is None else "")
        return outer, event + (f" {os.fsdecode(args[0])}" if event in path_events and isinstance(args[0], str) else "")

    def settled_here(event, args, frame):
        """True for the events a library raises by the thousand (an import's file reads,
        imports and module code) when no learner frame could change the verdict, which
        is None: decided without walking the stack (judge's slow part)."""
        if event == "open":
            path, mode = args[0], str(args[1] or "r")
            return isinstance(path, int) or (isinstance(path, str) and path.startswith(installed)
                                             and "/.." not in path and not any(c in mode for c in "wax+"))
        if event == "import":
            importer = importer_of(frame)
            return str(args[0]).split(".")[0] not in dangerous and (importer is None or not learner(importer))
        if event in code_events:
            return (frame.f_globals.get("__name__", "").startswith("importlib") or frame.f_code.co_filename.startswith(
                "<frozen importlib")) and library_code(event, args)
        return False

    def importer_of(frame):
        """The frame that asked for an import: the first one outside importlib's machinery."""
        while frame is not None and (frame.f_code.co_filename.startswith("<frozen importlib")
                                     or frame.f_globals.get("__name__", "").startswith("importlib")):
            frame = frame.f_back
        return frame

    def entry_frame(frame):
        """The frame just inside the nearest learner frame: what the learner's code called."""
        f = frame
        while f.f_back is not None and not learner(f.f_back):
            f = f.f_back
        return f

    def library_code(event, args):
        """The code of an import comes from an installed file: under the interpreter, the
        environment or the course's packages, which the sandbox binds read-only (wherever they
        are: a checkout under /tmp is as installed as one anywhere else)."""
        path = args[1] if event == "compile" and len(args) > 1 else getattr(args[0], "co_filename", "")
        path = os.fsdecode(path) if isinstance(path, (str, bytes)) else ""
        return path.startswith("/") and resolved(path).startswith(installed)

    def resolved(path):
        """realpath(path), with each folder's resolved once: module files come by the hundred from a few folders."""
        folder, name = os.path.split(path)
        if name in ("", ".", "..") or islink(path):
            return realpath(path)
        if folder not in folders:
            folders[folder] = realpath(folder)
        return folders[folder] + "/" + name

    def on_process(event, args, frame):
        """Any process start once the kernel is up: recorded where it came from, and refused."""
        f, where = frame, None
        while f is not None and where is None:
            where, f = learner(f), f.f_back
        cell, line = where or (state["cell"], 0)
        shown = " ".join(os.fsdecode(a) if isinstance(a, (str, bytes)) else repr(a)[:80] for a in args[:2])
        record("event", cell=cell, line=line, what=f"starts a process: {event} {shown}"[:300])
        raise PermissionError(f"the grader's sandbox starts no process ({event})")

    def on_check(args, frame):
        """A hidden check passed and is about to print its ✔ line (safe.ok): compare the snapshot
        now, and sign the pass, if safe.ok called from @check's wrapper raised the event."""
        if frame.f_code is not ok_code or frame.f_back is None or frame.f_back.f_code is not run_code:
            record("event", cell=state["cell"], line=0, what="a check's pass was announced by other code")
            return
        changed = tampered()
        if changed:
            record("tamper", cell=state["cell"], what=changed[:20])
        record("check", cell=state["cell"], name=str(args[0]) if args else "")

    def hook(event, args):
        if state["busy"] or (event not in rules and event != check_event):
            return
        state["busy"] = True
        try:
            frame = getframe(1)
            if event == check_event:
                return on_check(args, frame)
            if event in processes:  # once the kernel is up: its first cell has started (start-up is the grader's)
                return on_process(event, args, frame) if state["shell"] is not None else None
            verdict = judge(event, args, frame)
            if verdict is not None:
                (cell, line), what = verdict
                record("event", cell=cell, line=line, what=what[:300])
                if (event == "os.truncate" and args[0] == fd) or what.startswith("opens /proc"):
                    raise PermissionError(f"the grader's audit does not allow {event} here")
        finally:
            state["busy"] = False

    sys.addaudithook(hook)
    record("start", pid=os.getpid())


# seccomp: (AUDIT_ARCH_*, execve, execveat) per machine; other machines go without the filter
_EXEC_CALLS = {"x86_64": (0xC000003E, 59, 322), "aarch64": (0xC00000B7, 221, 281)}


def forbid_exec() -> bool:
    """Load a seccomp filter that makes execve and execveat fail with EPERM in this process and every process
    or thread it starts (kept across fork). The audit refuses the process starts that raise an audit event;
    this stops those that raise none (C code: _posixsubprocess, libc's system through ctypes) from running any
    program. Loaded once the kernel's own exec is done, before ipykernel starts. Returns whether it was loaded."""
    import ctypes
    import os
    import struct

    machine = _EXEC_CALLS.get(os.uname().machine)
    if machine is None:
        return False
    arch, execve, execveat = machine
    op = lambda code, k, jt=0, jf=0: struct.pack("HBBI", code, jt, jf, k)  # noqa: E731  (struct sock_filter)
    ld, jeq, ret = 0x20, 0x15, 0x06  # BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_RET|BPF_K
    allow, eperm = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM
    program = b"".join([op(ld, 4), op(jeq, arch, 1, 0), op(ret, allow),  # seccomp_data.arch
                        op(ld, 0), op(jeq, execve, 2, 0), op(jeq, execveat, 1, 0), op(ret, allow),  # .nr
                        op(ret, eperm)])
    code = ctypes.create_string_buffer(program)
    fprog = struct.pack("HxxxxxxP", len(program) // 8, ctypes.addressof(code))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        return False
    return libc.prctl(22, 2, ctypes.c_char_p(fprog), 0, 0) == 0  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER


def start(fd: int, config_fd: int) -> None:
    """The audit of this kernel, from its channel `fd` and its one-time configuration pipe `config_fd`
    (kernel.py's _audit_channel), for the working folder this process is in; then the exec filter."""
    import json
    import os

    with os.fdopen(config_fd, "r") as fh:
        config = json.load(fh)
    install(fd, bytes.fromhex(config["key"]), frozenset(config["trusted"]), frozenset(config["allowed"]),
            os.getcwd(), frozenset(config.get("end", ())))
    forbid_exec()


def main() -> None:
    argv = sys.argv[1:]
    fd, config_fd = int(argv[argv.index("--audit-fd") + 1]), int(argv[argv.index("--config-fd") + 1])
    rest = argv[argv.index("--") + 1:]
    start(fd, config_fd)
    from .kernel_app import launch

    launch(rest)


if __name__ == "__main__":
    main()
