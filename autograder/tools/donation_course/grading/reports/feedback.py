"""Feedback preprocessor: hidden-test source and tracebacks never reach the
learner's HTML. Registered in autograder/nbgrader_config.py through
`c.GenerateFeedback.preprocessors`.

In every grade cell, the `### BEGIN HIDDEN TESTS` ... `### END HIDDEN TESTS`
block is replaced by a one-line note, and every error output is reduced to the
exception's message (the learner message the check raised), without the
traceback that would quote the hidden source.
"""
import re

import jinja2
from nbconvert.exporters import HTMLExporter
from nbgrader.preprocessors import NbGraderPreprocessor
from nbgrader.utils import is_grade

HIDDEN = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS.*?^[ \t]*### END HIDDEN TESTS[^\n]*\n?", re.S | re.M)
NOTE = "# (graded checks run here; their results are shown below)\n"


# an absolute path of two or more parts (the server's folders), in any output
PATH = re.compile(r"(?<![\w.:/])/(?:[\w.@+-]+/)+[\w.@+-]*")
CHECK_LINE = ("\u2714", "\u2718", "Hint:", "[output capped")
PRINTED = "(what the code printed while the checks ran is not shown)\n"


def no_paths(text: str) -> str:
    return PATH.sub("<path>", text)


def check_lines(text: str) -> str:
    """Keep the checks' own lines of a grade cell's stream output; the rest
    (what the learner's function printed while the hidden checks called it,
    which could show their inputs) becomes one note."""
    lines = text.splitlines(keepends=True)
    kept = [ln for ln in lines if ln.lstrip().startswith(CHECK_LINE)]
    return "".join(kept) + (PRINTED if len(kept) < len(lines) else "")


def strip_hidden(source: str) -> str:
    return HIDDEN.sub(NOTE, source).rstrip("\n")


def learner_message(output) -> str:
    ename, evalue = output.get("ename", "Error"), str(output.get("evalue", ""))
    if ename in ("HiddenCheckFailed", "CheckFailed", "AssertionError"):
        return evalue or "a check failed"
    return f"{ename}: {evalue}" if evalue else ename


class StripHiddenTests(NbGraderPreprocessor):
    """Remove hidden-test source and tracebacks from grade cells."""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        grade = is_grade(cell)
        if grade:
            cell.source = strip_hidden(cell.source)
        for output in cell.get("outputs", []):
            kind = output.get("output_type")
            if kind == "error":
                if grade:
                    output["traceback"] = [learner_message(output)]
                output["evalue"] = no_paths(str(output.get("evalue", "")))
                output["traceback"] = [no_paths(line) for line in output.get("traceback", [])]
            elif kind == "stream":
                text = check_lines(output.get("text", "")) if grade else output.get("text", "")
                output["text"] = no_paths(text)
            elif kind in ("execute_result", "display_data"):
                data = output.get("data", {})
                for key in ("text/plain", "text/html", "text/markdown"):
                    if isinstance(data.get(key), str):
                        data[key] = no_paths(data[key])
        return cell, resources


class MemoryBytecodeCache(jinja2.BytecodeCache):
    """jinja2's bytecode-cache hook, with the compiled code kept in a dict."""

    def __init__(self):
        self.store = {}

    def load_bytecode(self, bucket):
        code = self.store.get(bucket.key)
        if code is not None:
            bucket.bytecode_from_string(code)

    def dump_bytecode(self, bucket):
        self.store[bucket.key] = bucket.bytecode_to_string()


_BYTECODE = MemoryBytecodeCache()


class CachedHTMLExporter(HTMLExporter):
    """nbconvert's HTMLExporter whose jinja templates compile once per process.

    nbgrader builds a new exporter, and so a new jinja environment, for every
    `generate_feedback` call. Compiling nbgrader's feedback template and the
    nbconvert templates it extends, again for every student, was the largest
    CPU cost of a grading worker (measured with cProfile). jinja's bytecode
    cache is keyed by template name and checks the source checksum, so an
    edited template is still recompiled; the HTML is the same as
    HTMLExporter's. Used by the grading workers (worker.py).
    """

    def _create_environment(self):
        environment = super()._create_environment()
        environment.bytecode_cache = _BYTECODE
        return environment
