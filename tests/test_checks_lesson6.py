"""The check cell of exercise 6.2, run as lesson 6 writes it, on the wrong
answers learners are likely to type: each gets a message of one paragraph
(the message and its hint) that names the mistake, never a traceback. The
two shardings JAX itself refuses inside `with_sharding_constraint` (one on
the Explicit mesh, whose error suggests `reshard`, and a bare PartitionSpec,
whose error asks for a context mesh) point to the input's own mesh
instead (checks.call_constrained), without naming the answer's sharding. Lesson 6 needs 8 devices, so the cells
run in a process of their own."""
import json
import textwrap

import nbformat
import pytest

from donation_course.course import COURSE
from helpers import run_on_eight_devices

LESSON_6 = "06_shardings.ipynb"
SETUP = ("l6-flags", "l6-silent")

ANSWERS = {
    "right": "quiet_fixed = jax.jit(lambda v: jax.lax.with_sharding_constraint(2.0 * v, auto_split), "
             "donate_argnums=0)",
    "explicit split": "quiet_fixed = jax.jit(lambda v: jax.lax.with_sharding_constraint(2.0 * v, split), "
                      "donate_argnums=0)",
    "bare spec": "quiet_fixed = jax.jit(lambda v: jax.lax.with_sharding_constraint(2.0 * v, P('x')), "
                 "donate_argnums=0)",
    "explicit replicated": "quiet_fixed = jax.jit(lambda v: jax.lax.with_sharding_constraint(2.0 * v, "
                           "replicated), donate_argnums=0)",
    "unchanged": "quiet_fixed = jax.jit(double_then_replicate, donate_argnums=0)",
    "no constraint": "quiet_fixed = jax.jit(lambda v: 2.0 * v, donate_argnums=0)",
    "not donating": "quiet_fixed = jax.jit(lambda v: jax.lax.with_sharding_constraint(2.0 * v, auto_split))",
}

SCRIPT = """
import contextlib, io, json, sys
import matplotlib
matplotlib.use("Agg")
from donation_lab.checks import CheckFailed

cells, answers = json.loads(sys.argv[1]), json.loads(sys.argv[2])
namespace = {}
with contextlib.redirect_stdout(io.StringIO()):
    for name in SETUP:
        exec(compile(cells[name], name, "exec"), namespace)
res = {}
for name, answer in answers.items():
    scope = dict(namespace)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        try:
            exec(compile(answer, "answer", "exec"), scope)
            exec(compile(cells["l6-q2-check"], "l6-q2-check", "exec"), scope)
            message = ""
        except CheckFailed as failed:
            message = str(failed)
    res[name] = {"message": message, "printed": printed.getvalue()}
print("RESULT" + json.dumps(res))
"""


def source(*ids: str) -> dict:
    found = {c.get("id"): c.source for c in nbformat.read(COURSE.source / LESSON_6, as_version=4).cells}
    missing = [i for i in ids if i not in found]
    assert not missing, f"{LESSON_6} has no cell {missing}: update this test"
    return {i: found[i] for i in ids}


def one_paragraph(message: str) -> bool:
    lines = message.splitlines()
    return (0 < len(lines) <= 2 and (len(lines) == 1 or lines[1].startswith("Hint: "))
            and "Traceback" not in message and "File \"" not in message)


@pytest.fixture(scope="module")
def checked():
    script = f"SETUP = {SETUP!r}\n" + textwrap.dedent(SCRIPT)
    proc = run_on_eight_devices(script, json.dumps(source(*SETUP, "l6-q2-check")), json.dumps(ANSWERS))
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(out for out in proc.stdout.splitlines() if out.startswith("RESULT"))
    return json.loads(line[len("RESULT"):])


def test_the_right_answer_passes(checked):
    assert checked["right"]["message"] == ""
    assert "the input of quiet_fixed is deleted" in checked["right"]["printed"]


def test_a_sharding_on_the_explicit_mesh_gets_a_paragraph_that_points_to_the_inputs_own(checked):
    message = checked["explicit split"]["message"]
    assert one_paragraph(message), message
    assert message.startswith("quiet_fixed(arange(16)): with_sharding_constraint was given a sharding on the "
                              "Explicit mesh, and JAX refused it (ValueError)."), message
    assert message.endswith("nothing needs moving: constrain to a sharding on the input's own mesh.\n"
                            "Hint: constrain to the sharding the input already has (see Hint 1)."), message
    assert "You probably meant" not in message and "AbstractMesh" not in message
    assert "auto_split" not in message  # the mesh to look on, not the answer's sharding


def test_a_bare_partition_spec_gets_a_paragraph_that_asks_for_a_sharding_on_the_auto_mesh(checked):
    message = checked["bare spec"]["message"]
    assert one_paragraph(message), message
    assert "a bare PartitionSpec" in message, message
    assert "a whole sharding instead, on the input's own mesh (the Auto one)." in message, message
    assert "set_mesh" not in message and "auto_split" not in message


@pytest.mark.parametrize("answer", ["explicit replicated", "unchanged", "not donating"])
def test_an_answer_that_runs_but_does_not_donate_is_told_to_match_the_input_layout(checked, answer):
    message = checked[answer]["message"]
    assert one_paragraph(message), message
    assert message.startswith("the input of quiet_fixed"), message
    assert message.endswith("Hint: donate v, and lay the result out like the input (see Hint 1)."), message


def test_dropping_the_constraint_is_named(checked):
    message = checked["no constraint"]["message"]
    assert one_paragraph(message), message
    assert "it has no with_sharding_constraint, which the exercise keeps" in message
