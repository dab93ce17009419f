"""What a learner and an instructor read about a graded notebook: each grade
cell's learner message, and a one-line diagnosis when nbgrader failed."""
from __future__ import annotations

from pathlib import Path

CHECK_MARK = "\u2714"


# What a learner's error means when a sandbox cap caused it (settings.py has the figures)
CAPS = {"No space left on device": "the sandbox's disk cap (GradingSettings.disk_mb)",
        "Not enough free space": "the sandbox's disk cap (GradingSettings.disk_mb)",  # numpy's tofile on a full disk
        "File too large": "the sandbox's file-size cap (GradingSettings.max_file_mb)",
        "MemoryError": "the kernel's memory cap (GradingSettings.memory_mb)",
        "Resource temporarily unavailable": "the sandbox's process cap (GradingSettings.max_processes)"}


def cap_hit(message: str) -> str:
    """' (hit <cap>)' when `message` is an error a sandbox cap causes, else ''."""
    return next((f" (hit {cap})" for text, cap in CAPS.items() if text in message), "")


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


def cell_messages(autograded: Path) -> dict[str, dict]:
    """grade_id -> {"message", "error"}: the learner-facing message of each
    grade or answer cell (its last check line, or what it raised)."""
    import nbformat
    from nbgrader.utils import is_grade, is_solution

    from ...course import grade_id
    from .feedback import learner_message

    out = {}
    try:
        nb = nbformat.read(autograded, as_version=4)
    except Exception:
        return out
    for cell in nb.cells:
        if cell.cell_type != "code" or not (is_grade(cell) or is_solution(cell)):
            continue
        message, errored = "", False
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error":
                message = learner_message(o)  # the same rule as the feedback HTML's
                errored = True
            elif o.get("output_type") == "stream" and o.get("name") == "stdout" and not errored:
                lines = [ln for ln in o.get("text", "").splitlines() if ln.startswith(CHECK_MARK)]
                if lines:
                    message = lines[-1]
        out[grade_id(cell) or cell.get("id")] = {"message": message.strip(), "error": errored}
    return out
