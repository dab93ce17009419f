"""The repository is clean under ruff (pinned in requirements-test.txt,
configured in pyproject.toml's [tool.ruff]): pyflakes, pycodestyle, import
order, bugbear's likely bugs, pyupgrade. The second test shows the check can
fail: the same configuration reports a file written to break each rule
family it selects."""
import re
import subprocess
import sys

from helpers import ROOT

PYPROJECT = ROOT / "pyproject.toml"


def ruff(*args, cwd=ROOT):
    # The environment's own ruff (the pinned one), never a ruff found on PATH;
    # no cache, so a test run writes nothing into the repository.
    return subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise",
                           *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_the_repository_is_clean_under_ruff():
    result = ruff(ROOT)
    problems = f"{result.stdout}{result.stderr}"
    assert result.returncode == 0, f"ruff check found problems (fix them, or see pyproject.toml):\n{problems}"


def test_the_check_covers_the_course_script_and_every_python_folder():
    # `course` has no .py suffix: only pyproject.toml's extend-include makes
    # ruff read it; a config change that drops it would pass the test above.
    listed = ruff("--show-files", ROOT)
    assert listed.returncode == 0, listed.stderr
    files = {line.strip() for line in listed.stdout.splitlines()}
    assert str(ROOT / "course") in files, listed.stdout
    for folder in ("src/donation_lab", "autograder/tools/donation_course", "tests", "benchmarks"):
        assert any(f.startswith(f"{ROOT / folder}/") and f.endswith(".py") for f in files), (folder, listed.stdout)


# One violation per rule family that pyproject.toml selects (one line each).
BROKEN = "\n".join([
    "import sys",
    "import os",  # I001 (after sys), F401 (unused)
    "from typing import List",
    "",
    "",
    "def f(a: List[int], b) -> None:",  # UP006
    "    for x, y in zip(a, b):",  # B905
    "        print(x, y, undefined_name, sys.argv)  ",  # F821, W291
    "    return print('" + "a long line " * 10 + "')",  # E501
    "",
])

EXPECTED = {
    "I001": "imports out of order",
    "F401": "an unused import",
    "F821": "an undefined name",
    "E501": "a line over 120 characters",
    "W291": "trailing whitespace",
    "B905": "zip() without strict=",
    "UP006": "typing.List instead of list",
}


def test_ruff_fails_on_a_file_that_breaks_the_rules(tmp_path):
    scratch = tmp_path / "broken.py"
    scratch.write_text(BROKEN)
    result = ruff("--config", PYPROJECT, scratch, cwd=tmp_path)
    assert result.returncode == 1, f"ruff should have failed ({result.returncode}):\n{result.stdout}{result.stderr}"
    # concise output: "broken.py:LINE:COLUMN: CODE message", the path relative to cwd
    reported = {m.group(1) for m in re.finditer(r"^broken\.py:\d+:\d+: ([A-Z]+\d+) ", result.stdout, re.M)}
    missing = {code: what for code, what in EXPECTED.items() if code not in reported}
    assert not missing, f"ruff did not report {missing}:\n{result.stdout}"
