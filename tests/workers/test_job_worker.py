"""JobWorker / JobRunner: one outcome per job, one failure shape, cancel and shutdown."""

from __future__ import annotations

import threading

import pytest

from app.errors import HearthError
from app.jobs import Job, JobCancelled, JobControl, Progress
from app.workers.job_worker import JobRunner


class Events:
    def __init__(self, runner: JobRunner) -> None:
        self.items: list[tuple] = []
        w = runner.worker
        runner.queued.connect(lambda j: self.items.append(("queued", j)))
        w.started.connect(lambda j: self.items.append(("started", j)))
        w.progress.connect(lambda j, p: self.items.append(("progress", j, p)))
        w.finished.connect(lambda j, r: self.items.append(("finished", j, r)))
        w.failed.connect(lambda j, m: self.items.append(("failed", j, m)))
        w.cancelled.connect(lambda j: self.items.append(("cancelled", j)))
        w.crashed.connect(lambda d: self.items.append(("crashed", d)))

    def kinds(self, job_id: str | None = None) -> list[str]:
        return [e[0] for e in self.items if job_id is None or e[1:2] == (job_id,)]


@pytest.fixture
def runner(qtbot):
    r = JobRunner("test-jobs")
    yield r
    assert r.shutdown(5000)


def test_a_job_reports_progress_then_its_result(qtbot, runner):
    events = Events(runner)

    def work(report, control):
        report(Progress(0.5, "halfway"))
        return 42

    assert runner.submit(Job("a", "Job A", work))
    qtbot.waitUntil(lambda: "finished" in events.kinds() and not runner.pending(), timeout=5000)
    assert events.kinds() == ["queued", "started", "progress", "finished"]
    assert events.items[2][2] == Progress(0.5, "halfway")
    assert events.items[3] == ("finished", "a", 42)
    assert runner.pending() == []


def test_a_user_error_fails_with_its_sentence_and_a_bug_also_reports_a_crash(qtbot, runner):
    events = Events(runner)

    def user_error(report, control):
        raise HearthError("The disk is full.", hint="Free some space.")

    def bug(report, control):
        raise ZeroDivisionError("boom")

    runner.submit(Job("u", "Import", user_error))
    runner.submit(Job("b", "Import", bug))
    # the bug's crash report is emitted just after its failure: wait for both deliveries
    qtbot.waitUntil(lambda: events.kinds().count("failed") == 2
                    and "crashed" in events.kinds(), timeout=5000)
    failed = [e for e in events.items if e[0] == "failed"]
    assert failed[0][1] == "u" and failed[0][2].startswith("The disk is full.")
    assert "Traceback" not in failed[0][2] and "Traceback" not in failed[1][2]
    assert failed[1] == ("failed", "b", "Import stopped because of a bug: boom")
    crashes = [e for e in events.items if e[0] == "crashed"]
    assert len(crashes) == 1 and "ZeroDivisionError" in crashes[0][1]


def test_the_same_id_is_not_queued_twice(qtbot, runner):
    gate = threading.Event()
    runner.submit(Job("x", "X", lambda r, c: gate.wait(5)))
    assert not runner.submit(Job("x", "X again", lambda r, c: None))
    gate.set()
    qtbot.waitUntil(lambda: runner.pending() == [], timeout=5000)
    assert runner.submit(Job("x", "X", lambda r, c: None))


def test_a_user_cancel_stops_a_running_job_and_gives_up_its_partial_work(qtbot, runner):
    events = Events(runner)
    started = threading.Event()
    kept: list[bool] = []

    def work(report, control: JobControl):
        started.set()
        try:
            while True:
                control.checkpoint()
                control.sleep(0.01)
        except JobCancelled:
            kept.append(control.keep_partial)
            raise

    runner.submit(Job("c", "Long", work))
    assert started.wait(5)
    runner.cancel("c")
    qtbot.waitUntil(lambda: "cancelled" in events.kinds(), timeout=5000)
    assert kept == [False]
    assert "failed" not in events.kinds()


def test_a_job_cancelled_while_queued_never_starts(qtbot, runner):
    events = Events(runner)
    gate = threading.Event()
    runner.submit(Job("first", "First", lambda r, c: gate.wait(5)))
    runner.submit(Job("second", "Second", lambda r, c: pytest.fail("must not run")))
    runner.cancel("second")
    gate.set()
    qtbot.waitUntil(lambda: "cancelled" in events.kinds(), timeout=5000)
    assert events.kinds("second") == ["queued", "cancelled"]


def test_shutdown_cancels_running_jobs_but_keeps_their_partial_work(qtbot):
    runner = JobRunner("test-jobs")
    started = threading.Event()
    kept: list[bool] = []

    def work(report, control):
        started.set()
        try:
            while True:
                control.checkpoint()
                control.sleep(0.01)
        except JobCancelled:
            kept.append(control.keep_partial)
            raise

    runner.submit(Job("d", "Download", work, pausable=True))
    assert started.wait(5)
    assert runner.shutdown(5000)
    assert kept == [True]


def test_pause_blocks_at_the_next_checkpoint_and_resume_continues(qtbot, runner):
    events = Events(runner)
    steps: list[int] = []
    paused_seen = threading.Event()

    def work(report, control):
        for i in range(3):
            control.checkpoint(on_pause=paused_seen.set)
            steps.append(i)
            if i == 0:
                runner.pause("p")
        return steps

    runner.submit(Job("p", "Pausable", work, pausable=True))
    assert paused_seen.wait(5)
    assert steps == [0]
    runner.resume("p")
    qtbot.waitUntil(lambda: "finished" in events.kinds(), timeout=5000)
    assert steps == [0, 1, 2]


def test_progress_percent():
    assert Progress(None).percent == -1
    assert Progress(0.257).percent == 25
    assert Progress(1.5).percent == 100
    with pytest.raises(JobCancelled):
        control = JobControl()
        control.cancel()
        control.checkpoint()
