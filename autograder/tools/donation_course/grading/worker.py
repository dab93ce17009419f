"""A long-lived grading worker: one process, one NbGraderAPI, its own copy of
the gradebook. It autogrades and generates feedback for one student at a time
(real nbgrader, in process: no nbgrader/Python start-up per student) and sends
back the scores; the main process is the only writer of the real gradebook."""
import os
import traceback
from pathlib import Path

from ..course import Course, load_config

KERNEL_NAME = "donation-lab-graded"


def make_kernelspec(folder: Path, python: str) -> Path:
    """A kernelspec whose launcher caps memory (see kernel.py)."""
    import json

    spec = folder / "kernels" / KERNEL_NAME
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [python, "-m", "donation_course.grading.kernel", "-f", "{connection_file}"],
        "display_name": "Python 3 (graded, memory-limited)", "language": "python",
        # interrupt over the control channel: the kernel runs in its own session
        # (bwrap --new-session), where a SIGINT to the launcher's group never arrives
        "interrupt_mode": "message",
    }))
    return folder


def make_api(course: Path, db: Path, cell_timeout: int):
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    cfg = load_config(course)
    cfg.CourseDirectory.root = str(course)
    cfg.CourseDirectory.db_url = f"sqlite:///{db}"
    cfg.Execute.timeout = cell_timeout
    cfg.Execute.interrupt_on_timeout = True
    cfg.Execute.kernel_name = KERNEL_NAME
    # Unix sockets in the kernel's own runtime folder (bound into its sandbox
    # only): no TCP ports, so no port race between parallel kernels either.
    cfg.KernelManager.transport = "ipc"
    # (nbgrader's Execute passes its own kernel_manager_class, so the client is set on the manager)
    cfg.AsyncKernelManager.client_class = "donation_course.grading.fastkernel.GradingKernelClient"
    cfg.Execute.shutdown_kernel = "immediate"  # outputs are collected by then (see fastkernel.py)
    # Plain tracebacks: IPython's default "Context" mode reads and parses the
    # source of every frame (jax's too), ~0.15 s of kernel CPU per failing
    # check; grade cells show only the check's message anyway (feedback.py).
    # Added to the course config's list (no history file, hidden checks at start), never replacing it.
    cfg.Execute.extra_arguments = [*cfg.Execute.get("extra_arguments", []), "--InteractiveShell.xmode=Plain"]
    cfg.GenerateFeedback.exporter_class = "donation_course.grading.feedback.CachedHTMLExporter"
    coursedir = CourseDirectory(config=cfg)
    return NbGraderAPI(coursedir=coursedir, config=cfg)


def diagnose(log: str, error: str) -> str:
    text = (log or "") + "\n" + (error or "")
    if "DeadKernelError" in text or "Kernel died" in text or "kernel died" in text.lower():
        return "the kernel died while running the notebook (the code exited the process, crashed, or was killed)"
    if "Kernel didn't respond" in text:
        return "the kernel did not start in time"
    if "UnresponsiveKernelError" in text or "became unresponsive" in text:
        return "the kernel stopped responding and could not be interrupted"
    if "NotJSONError" in text or "JSONDecodeError" in text or "not valid JSON" in text:
        return "the notebook file is not valid notebook JSON"
    if "duplicate" in text.lower() and "grade" in text.lower():
        return "the notebook has duplicated graded cells that nbgrader could not resolve"
    return ("nbgrader could not grade this submission; your instructor has the full log "
            "(nothing you submitted was lost)")


def died_at_startup(log: str, error: str) -> bool:
    """The kernel died, or never answered, before it ran a cell: worth one
    more try, since that can be the machine's doing. A kernel that died or
    hung while running a cell did so in the submission's own code, and a
    second run would give the same verdict at the same cost."""
    text = (log or "") + "\n" + (error or "")
    return "before replying to kernel_info" in text or "Kernel didn't respond" in text


def cell_messages(autograded: Path) -> dict:
    """grade_id -> the learner-facing message of that cell's last check line or error."""
    import nbformat

    from .feedback import learner_message

    out = {}
    try:
        nb = nbformat.read(autograded, as_version=4)
    except Exception:
        return out
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or not (meta.get("grade") or meta.get("solution")):
            continue
        message, errored = "", False
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error":
                message = learner_message(o)  # the same rule as the feedback HTML's
                errored = True
            elif o.get("output_type") == "stream" and o.get("name") == "stdout" and not errored:
                lines = [ln for ln in o.get("text", "").splitlines() if ln.startswith("\u2714")]
                if lines:
                    message = lines[-1]
        out[meta.get("grade_id", cell.get("id"))] = {"message": message.strip(), "error": errored}
    return out


def scan_submission(course: Path, student: str, assignment: str) -> dict:
    """{notebook: [Flag]} for the student's submitted notebooks (scan.py), read before any kernel starts."""
    import nbformat

    from .scan import scan_notebook

    flags = {}
    for path in sorted((course / "submitted" / student / assignment).glob("*.ipynb")):
        release = course / "release" / assignment / path.name
        try:
            nb = nbformat.read(path, as_version=4)
            rel = nbformat.read(release, as_version=4) if release.exists() else None
        except Exception:
            continue  # not a notebook: nbgrader reports it
        found = scan_notebook(nb, path.stem, rel)
        if found:
            flags[path.stem] = found
    return flags


def apply_flags(result: dict, flags: dict) -> None:
    """A flagged notebook: every grade cell waits for the instructor
    (needs_manual_grade) with no automatic points; the reason names cell, line and construct."""
    if not flags:
        return
    for nbname, found in flags.items():
        for g in result["notebooks"].get(nbname, {}).get("grades", []):
            g["auto_score"], g["needs_manual_grade"] = 0.0, True
            g["message"] = "flagged for the instructor (manual grading): " + found[0].reason
    result["status"] = "flagged"
    listed = "; ".join(str(f) for found in flags.values() for f in found[:5])
    result["reason"] = ("flagged for manual grading, no automatic points: " + listed
                        + (" | " + result["reason"] if result.get("reason") else ""))


def new_scratch(student: str, api=None) -> Path:
    """A fresh scratch folder (sandbox copy of the working folder) and runtime
    folder (connection file, sockets) for this student's kernels."""
    import shutil
    import tempfile

    base = Path(os.environ["DONATION_LAB_TMP"])
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(mode=0o700, parents=True)
    run = Path(tempfile.mkdtemp(dir=base, prefix="r"))
    os.environ["DONATION_LAB_RUNTIME"] = str(run)
    if api is not None:  # the sockets' absolute path (the default is relative to the working folder)
        api.config.KernelManager.ip = str(run / "kernel-ipc")
    os.environ["DONATION_LAB_SCRATCH"] = str(base / "scratch")
    return base


def grade_one(api, course: Path, student: str) -> dict:
    ASSIGNMENT = Course(course).assignment

    result = {"student": student, "notebooks": {}, "ok": True, "reason": ""}
    flags = scan_submission(course, student, ASSIGNMENT)
    try:
        return _grade(api, course, student, ASSIGNMENT, result, flags)
    finally:
        import shutil

        shutil.rmtree(os.environ.get("DONATION_LAB_TMP", "/nonexistent"), ignore_errors=True)


def _grade(api, course, student, ASSIGNMENT, result, flags):
    from nbgrader.api import Gradebook

    new_scratch(student, api)
    res = api.autograde(ASSIGNMENT, student, force=True, create=True)
    if not res.get("success") and died_at_startup(res.get("log", ""), res.get("error", "")):
        new_scratch(student, api)
        res = api.autograde(ASSIGNMENT, student, force=True, create=True)
    if not res.get("success"):
        result["ok"] = False
        result["reason"] = diagnose(res.get("log", ""), res.get("error", ""))
        result["log"] = f"{res.get('log', '')}\n{res.get('error', '')}"
    else:
        fb = api.generate_feedback(ASSIGNMENT, student, force=True)
        if not fb.get("success"):
            result["reason"] = "feedback could not be generated: " + diagnose(fb.get("log", ""), fb.get("error", ""))
            result["log"] = f"{fb.get('log', '')}\n{fb.get('error', '')}"
    with Gradebook(api.coursedir.db_url, api.course_id) as gb:
        try:
            sub = gb.find_submission(ASSIGNMENT, student)
        except Exception:
            apply_flags(result, flags)
            return result
        result["timestamp"] = sub.timestamp.isoformat() if sub.timestamp else None
        for nb in sub.notebooks:
            auto = course / "autograded" / student / ASSIGNMENT / f"{nb.name}.ipynb"
            msgs = cell_messages(auto) if auto.exists() else {}
            grades = []
            for g in nb.grades:
                grades.append({"name": g.name, "auto_score": g.auto_score, "manual_score": g.manual_score,
                               "max_score": g.max_score, "needs_manual_grade": g.needs_manual_grade,
                               **msgs.get(g.name, {"message": "", "error": None})})
            comments = [{"name": c.name, "auto_comment": c.auto_comment, "manual_comment": c.manual_comment}
                        for c in nb.comments]
            solution_errors = {k: v["message"] for k, v in msgs.items() if v["error"] and
                               k not in {g["name"] for g in grades}}
            result["notebooks"][nb.name] = {"grades": grades, "comments": comments,
                                            "graded": auto.exists(), "solution_errors": solution_errors,
                                            "late_penalty": nb.late_submission_penalty}
    apply_flags(result, flags)
    return result


def use_compile_cache(folder) -> None:
    """Give this worker's kernels the course's JAX compilation cache, to
    read only (compile_cache.py). Results are the same with or without it;
    the test suite grades the solved course both ways."""
    os.environ["DONATION_LAB_COMPILE_CACHE"] = str(folder)  # kernel.py passes it on


def serve_env(tmp: str, sandbox: bool) -> None:
    os.environ["DONATION_LAB_TMP"] = tmp
    os.environ["DONATION_LAB_SANDBOX"] = "1" if sandbox else "0"


def serve(conn, course: str, db: str, cell_timeout: int, memory_mb: int, kernel_dir: str, log: str,
          compile_cache: str = "", tmp: str = "", sandbox: bool = True) -> None:
    """Worker main loop: receive a student id, send back a result dict."""
    os.setsid()
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)  # nbgrader's and the kernels' chatter goes to the log, not the terminal
    os.environ["DONATION_LAB_MEMORY_MB"] = str(memory_mb)
    os.environ["JUPYTER_PATH"] = kernel_dir + os.pathsep + os.environ.get("JUPYTER_PATH", "")
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    serve_env(tmp, sandbox)
    if tmp:
        # Temporary files of this process (jupyter_client writes each kernel's
        # connection file with mkstemp) go under the run's scratch folder,
        # which the grader removes however the run ends: a worker killed
        # mid-student (Ctrl-C, time limit) leaves nothing in the user's TMPDIR.
        import tempfile

        own_tmp = Path(tmp + "-tmp")
        own_tmp.mkdir(parents=True, exist_ok=True)
        os.environ["TMPDIR"] = tempfile.tempdir = str(own_tmp)
    if compile_cache:
        use_compile_cache(compile_cache)
    course_p = Path(course)
    os.chdir(course_p)
    api = make_api(course_p, Path(db), cell_timeout)
    conn.send(("ready", None))
    while True:
        try:
            student = conn.recv()
        except EOFError:
            return
        if student is None:
            return
        try:
            conn.send(("done", grade_one(api, course_p, student)))
        except Exception:
            conn.send(("done", {"student": student, "notebooks": {}, "ok": False, "log": traceback.format_exc(),
                                "reason": "the grader itself failed on this submission; your instructor has "
                                          "the full log (nothing you submitted was lost)"}))
