"""`./course grade --scheduler` on a real dask.distributed cluster: a
scheduler and two `./course worker` processes on 127.0.0.1 (each its own
--local-directory, one process, one thread), shared by this module's tests
(xdist_units.SHARED_FIXTURE_UNITS keeps them on one xdist worker, in this
order). Part of the exercise's corpus graded there gives the local run's
grades.csv; a worker whose grading code differs is refused in one line;
Ctrl-C leaves no grading process, kernel, scratch folder or task behind; a
worker killed mid-run leaves every student graded once. Every process the
module starts is killed at its end, whatever happened."""
import gzip
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import nbformat
import psutil
import pytest

from donation_course.corpus import exercise as corpus
from donation_course.course import EXERCISE_ANSWER, ROOT
from helpers import COURSE_CMD, GRADE_LIMITS, LIMIT_SCALE, PARALLEL_LIMITS, grade, gradebook_scores, read_grades
from local_cluster import (
    MARKER,
    Cluster,
    describe,
    environ,
    grading_processes,
    kernels_of,
    kill_all,
    scaled,
    scratch_folders,
    wait_for,
    zygotes_of,
)

pytestmark = pytest.mark.slow

EX = corpus.EXERCISE
# a correct, a wrong, a flagged, a kernel-killing and a malformed submission, and one more of each kind of score
SUBSET = ["partial", "nodonate", "tamperer", "kernelkill", "malformed", "wrongarg"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, env):
    folder = Path(tmp_path_factory.mktemp("cluster"))
    c = None
    try:
        c = Cluster(folder, env)
        yield c
    finally:
        if c is not None:
            c.close()
        else:  # it failed to start: whatever it started still goes
            kill_all([p for p in psutil.process_iter() if MARKER in environ(p)])


@pytest.fixture(scope="module")
def corpus_files(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("corpus")
    corpus.build(folder)
    return folder


# Appended to the answer of a student a test interrupts: the answer cell
# sleeps until the run's cell limit stops it (the answer is still defined, so
# the student keeps the corpus's score). A grading kernel of such a student
# lives at least that limit: a test that acts while the kernel is young acts,
# provably, in the middle of that student.
SLEEP = "\nimport time\ntime.sleep(900)\n"
# The Ctrl-C test's run: no sleeping cell ends before the signal, however slow this machine.
UNENDING = ["--workers", "2", "--timeout", "900", "--cell-timeout", "800", "--no-progress"]
# The killed-worker test's run: a sleeping cell ends, and its student is graded, after KILL_CELL seconds;
# w1 is killed while its kernel is younger than half that, so at least KILL_CELL / 2 seconds before it ends.
KILL_CELL = round(12 * LIMIT_SCALE)  # and at least the other runs' cell limit (helpers.GRADE_LIMITS)
KILL_LIMITS = ["--workers", "2", "--timeout", str(round(150 * LIMIT_SCALE)), "--cell-timeout", str(KILL_CELL),
               "--no-progress"]


def submissions(corpus_files: Path, dest: Path, students: list[str], copies: int = 1, sleepers=()) -> Path:
    dest.mkdir(parents=True)
    for i in range(copies):
        for s in students:
            shutil.copy(corpus_files / f"{s}_{EX}.ipynb", dest / f"{s}{i or ''}_{EX}.ipynb")
            if s in sleepers:
                path = dest / f"{s}{i or ''}_{EX}.ipynb"
                nb = nbformat.read(path, as_version=4)
                for cell in nb.cells:
                    if cell.metadata.get("nbgrader", {}).get("grade_id") == EXERCISE_ANSWER:
                        cell.source += SLEEP
                nbformat.write(nb, path)
    return dest


def in_progress(cluster, name: str) -> set:
    """The students a worker's grading process has in hand (their folders in its copy of the course)."""
    return {p.name for p in (cluster.folder / name).rglob("course-*/submitted/*")}


def young_kernels(cluster, name: str, cell_limit: float) -> list:
    """A worker's grading kernels started less than half the cell limit ago:
    each is in a student whose sleeping answer cell keeps it alive for at
    least the other half."""
    now = time.time()
    young = []
    for p in kernels_of(cluster, name):
        try:
            if now - p.create_time() < cell_limit / 2:
                young.append(p)
        except psutil.Error:
            pass
    return young


def ended(p: psutil.Process) -> bool:
    try:
        return not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def over(run: subprocess.Popen, log: Path) -> bool:
    """The run ended, or cannot grade: a worker was refused (another checkout's code, or this one's edited
    since the workers started)."""
    return run.poll() is not None or "refused worker" in log.read_text()


def stop(run: subprocess.Popen) -> None:
    """A run a failed test leaves: Ctrl-C, which stops its grading on the workers and puts the scheduler's
    allowed-failures back; SIGKILL if that does not end it (the next run then puts allowed-failures back:
    test_a_run_killed_before_it_could_put_allowed_failures_back_leaves_the_next_run_the_true_value)."""
    if run.poll() is None:
        run.send_signal(signal.SIGINT)
        try:
            run.wait(timeout=scaled(120))
        except subprocess.TimeoutExpired:
            run.kill()
            run.wait()


def start_run(course: Path, files: Path, limits: list, cluster, env: dict, log: Path) -> subprocess.Popen:
    with open(log, "w") as out:
        return subprocess.Popen([COURSE_CMD, "grade", files, "--course", course, *limits,
                                 "--scheduler", cluster.address], env=env, stdout=out,
                                stderr=subprocess.STDOUT)


def cluster_lines(course: Path) -> list[str]:
    return [ln for ln in (course / ".grading" / "logs" / "cluster.log").read_text().splitlines() if " student=" in ln]


def test_the_course_bundle_names_the_course_not_its_students(generated_course, tmp_path):
    """The same digest before and after students are graded into the gradebook; a worker unpacks it
    into a course with the assignment and no student; damaged bytes are refused."""
    from nbgrader.api import Gradebook

    from donation_course.course import Course
    from donation_course.grading.executors import bundle

    course = Course(generated_course(tmp_path / "course"))
    before = bundle.build(course, compile_cache=True)
    with Gradebook(course.db_url, course.course_id) as gb, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SQLAlchemy's notes on nbgrader's relationships
        gb.add_student("someone")
        gb.add_submission(course.assignment, "someone")
    assert bundle.build(course, compile_cache=True).digest == before.digest
    assert bundle.build(course, compile_cache=False).digest != before.digest
    tar = bundle.install(tmp_path / "cache", before.digest, before.data)
    assert bundle.cached(tmp_path / "cache", before.digest) == tar
    unpacked = bundle.unpack(tar, tmp_path / "unpacked")
    with Gradebook(f"sqlite:///{unpacked / 'gradebook.db'}", course.course_id) as gb:
        assert [a.name for a in gb.assignments] == [course.assignment] and not gb.students
    assert (Course(unpacked).compile_cache / "filled-from").exists()
    with pytest.raises(ValueError, match="damaged"):
        bundle.install(tmp_path / "cache", before.digest, gzip.compress(b"not the course"))
    assert bundle.differences({"jax": "1", "code": "a"}, {"jax": "2", "code": "a"}) == "jax 2 there, 1 here"


def test_the_cluster_grades_like_the_local_run(cluster, corpus_files, tmp_path, env, generated_course):
    files = submissions(corpus_files, tmp_path / "files", SUBSET)
    local = generated_course(tmp_path / "local")
    grade(env, files, "--course", local, *PARALLEL_LIMITS, "--scheduler", "local")
    remote = generated_course(tmp_path / "remote")
    r = grade(env, files, "--course", remote, *GRADE_LIMITS, "--scheduler", cluster.address)
    assert f"on the cluster at {cluster.address}" in r.stdout, r.stdout
    ours, theirs = read_grades(remote / ".grading" / "grades.csv"), read_grades(local / ".grading" / "grades.csv")
    assert ours == theirs
    for student in SUBSET:
        _, score, status, reason = corpus.CASES[student]
        assert (float(ours[student][EX]), ours[student]["status"]) == (score, status), ours[student]
    assert gradebook_scores(remote) == gradebook_scores(local)
    # what nbgrader made on the workers is in the course, where the local run's nbgrader left it
    made = lambda course: sorted(str(p.relative_to(course)) for top in ("autograded", "feedback", ".grading/feedback")
                                 for p in (course / top).rglob("*") if p.is_file())  # noqa: E731
    assert made(remote) == made(local)
    assert (remote / "feedback" / "partial" / corpus.COURSE.assignment / f"{EX}.html").exists()
    lines = cluster_lines(remote)
    assert sorted(ln.split(" student=")[1].split()[0] for ln in lines) == sorted(set(SUBSET) - {"malformed"})
    for ln in lines:
        assert all(f" {k}=" in ln for k in ("wait", "wall", "cpu", "rss", "sent", "returned")), ln
    assert "p50" in r.stderr and "p95" in r.stderr and "course bundle" in r.stderr, r.stderr
    assert not grading_processes(cluster), "a grading process outlived its run"


def test_a_mismatched_worker_is_refused_in_one_line(cluster, corpus_files, tmp_path, env, generated_course):
    # another checkout: the same packages, one hidden check's file changed
    other = tmp_path / "other-checkout"
    shutil.copytree(ROOT / "autograder" / "tools" / "donation_course", other / "donation_course",
                    ignore=shutil.ignore_patterns("__pycache__"))
    with open(other / "donation_course" / "hidden" / "exercise.py", "a") as fh:
        fh.write("\n# edited in another checkout\n")
    cluster.start_worker("odd", env={**cluster.env, "PYTHONPATH": str(other)},
                         cmd=[sys.executable, "-m", "distributed.cli.dask_worker", "--nthreads", "1",
                              "--no-dashboard"])
    try:
        cluster.client.wait_for_workers(3, timeout=scaled(120))
        odd = cluster.worker_address("odd")
        files = submissions(corpus_files, tmp_path / "files", ["partial", "nodonate"])
        course = generated_course(tmp_path / "course")
        r = grade(env, files, "--course", course, *GRADE_LIMITS, "--scheduler", cluster.address)
        refused = [ln for ln in r.stderr.splitlines() if ln.startswith("refused worker")]
        assert refused == [f"refused worker {odd}: its donation_course/donation_lab code (hidden checks, grader) "
                           "differs from this machine's: another checkout?"], r.stderr
        rows = read_grades(course / ".grading" / "grades.csv")
        assert {s: float(rows[s][EX]) for s in rows} == {s: corpus.CASES[s][1] for s in ("partial", "nodonate")}
        assert all(odd not in ln for ln in cluster_lines(course))
        assert not list((cluster.folder / "odd").rglob("course-*")), "the refused worker got the course"
    finally:
        cluster.stop("odd")
    wait_for(lambda: len(cluster.client.scheduler_info(n_workers=-1)["workers"]) == 2, 60, "the odd worker to leave")


def test_a_run_killed_before_it_could_put_allowed_failures_back_leaves_the_next_run_the_true_value(cluster):
    from donation_course.grading.executors.cluster import allowed_failures, put_back_failures

    def now():
        return cluster.client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.allowed_failures)

    assert now() == 3  # dask's default, as the module's runs leave it
    killed = cluster.client.run_on_scheduler(allowed_failures(1))  # a run SIGKILLed after lowering it
    assert killed == 3 and now() == 1
    following = cluster.client.run_on_scheduler(allowed_failures(1))  # the next run
    assert following == 3  # not the killed run's 1
    cluster.client.run_on_scheduler(put_back_failures(following))
    assert now() == 3
    assert cluster.client.run_on_scheduler(allowed_failures(1)) == 3  # and a later run starts from the value it had
    cluster.client.run_on_scheduler(put_back_failures(3))


def test_ctrl_c_cancels_and_leaves_nothing_behind_on_the_workers(cluster, corpus_files, tmp_path, env,
                                                                  generated_course):
    # both students sleep out a cell limit of 800 s: once a kernel of theirs is up, the run cannot end before Ctrl-C
    files = submissions(corpus_files, tmp_path / "files", ["partial", "nodonate"], sleepers={"partial", "nodonate"})
    course = generated_course(tmp_path / "course")
    log = tmp_path / "grade.log"
    run = start_run(course, files, UNENDING, cluster, env, log)
    try:
        held = wait_for(lambda: [(n, in_progress(cluster, n)) for n in ("w1", "w2")
                                 if in_progress(cluster, n) and kernels_of(cluster, n)] or over(run, log),
                        240, "a worker with a student and its kernel in hand")
        assert not over(run, log), log.read_text()
        run.send_signal(signal.SIGINT)
        assert run.wait(timeout=scaled(120)) == 130, (held, log.read_text())
    finally:
        stop(run)
    # the run exits only once each worker has stopped its grading processes and removed their files
    assert not grading_processes(cluster), describe(grading_processes(cluster))
    scratch = scratch_folders(cluster, "w1") + scratch_folders(cluster, "w2")
    assert scratch and not [s for s in scratch if s.exists()], "a grading process's scratch folder is left"
    for name in ("w1", "w2"):
        assert not list((cluster.folder / name).rglob("submitted/*")), "a student's files are left on a worker"
    wait_for(lambda: cluster.client.run_on_scheduler(lambda dask_scheduler: not dask_scheduler.tasks), 20,
             "the scheduler to forget the run's tasks")
    # the run set the scheduler's allowed-failures to 1 and put its default back
    assert cluster.client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.allowed_failures) == 3
    assert "allowed-failures could not be set" not in log.read_text()


def test_a_worker_killed_mid_run_leaves_every_student_graded_once(cluster, corpus_files, tmp_path, env,
                                                                   generated_course):
    students = sleepers = ["nodonate", "partial"]  # one on each worker: a young kernel on w1 is in one of them
    files = submissions(corpus_files, tmp_path / "files", students, sleepers=sleepers)
    course = generated_course(tmp_path / "course")
    victim, survivor = cluster.worker_address("w1"), cluster.worker_address("w2")
    log = tmp_path / "grade.log"
    run = start_run(course, files, KILL_LIMITS, cluster, env, log)
    try:
        try:
            # w1 has a sleeper in hand, its kernel young: that student cannot end for KILL_CELL / 2 seconds
            wait_for(lambda: over(run, log) or (young_kernels(cluster, "w1", KILL_CELL)
                                                 and set() < in_progress(cluster, "w1") <= set(sleepers)),
                     240, "w1 to grade a sleeping student")
            assert not over(run, log), log.read_text()
            in_progress_then, zygotes = in_progress(cluster, "w1"), zygotes_of(cluster, "w1")
            cluster.kill_group("w1")
            assert run.wait(timeout=scaled(400)) == 0, log.read_text()
        finally:
            stop(run)
        rows = read_grades(course / ".grading" / "grades.csv")  # fails on a student listed twice
        assert {s: float(rows[s][EX]) for s in rows} == {s: corpus.CASES[s][1] for s in students}
        assert set(gradebook_scores(course)) == set(students)
        lines = cluster_lines(course)
        graded = [ln.split(" student=")[1].split()[0] for ln in lines]
        assert sorted(graded) == sorted(students), lines  # one result merged per student
        assert in_progress_then and zygotes, (in_progress_then, zygotes)
        for student in in_progress_then:  # the student w1 was grading ran again, on w2
            assert any(f"student={student} worker={survivor}" in ln for ln in lines), lines
        # the killed worker's zygote, told by the kernel (its parent-death signal), kills its grading process and
        # kernels, removes their scratch folders, then exits
        wait_for(lambda: all(map(ended, zygotes)), 60, "the killed worker's zygote to clean up and exit")
        assert not grading_processes(cluster), describe(grading_processes(cluster))
        assert not [s for s in scratch_folders(cluster, "w1") if s.exists()], "the killed worker's scratch is left"
    finally:  # the cluster as the module's other tests expect it: two workers
        wait_for(lambda: victim not in cluster.client.scheduler_info(n_workers=-1)["workers"], 60,
                 "the scheduler to drop the killed worker")
        cluster.start_worker("w1")
        cluster.client.wait_for_workers(2, timeout=scaled(120))

