"""Jobs are kept on disk: a finished job reads back after a restart, and one the stopped process was
running reads back as failed (interrupted), never as running forever."""
import json
import time

from app.jobs import JobManager


def wait(jobs, job_id, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        j = jobs.get(job_id)
        if j.state in ("succeeded", "failed"):
            return j
        time.sleep(0.02)
    raise AssertionError("job did not finish")


def test_jobs_read_back_after_a_restart(tmp_path):
    jobs = JobManager(tmp_path)
    ok, started = jobs.submit("reindex", lambda progress: progress("build", 0.5) or {"generation": "gen-1"})
    assert started
    bad, _ = jobs.submit("evaluation", lambda progress: 1 / 0)
    assert wait(jobs, ok.id).state == "succeeded" and wait(jobs, bad.id).state == "failed"

    restarted = JobManager(tmp_path)  # a new process on the same folder
    done = restarted.get(ok.id)
    assert done.state == "succeeded" and done.result == {"generation": "gen-1"} and done.progress == 1.0
    failed = restarted.get(bad.id)
    assert failed.state == "failed" and "ZeroDivisionError" in failed.error
    assert restarted.get("nope") is None and restarted.get("../etc") is None


def test_a_job_cut_off_by_the_restart_reads_back_as_interrupted(tmp_path):
    (tmp_path / "abc123.json").write_text(json.dumps(
        {"id": "abc123", "kind": "reindex", "state": "running", "stage": "dense", "progress": 0.4,
         "created_at": 1.0, "started_at": 2.0, "finished_at": None, "result": None, "error": None}))
    job = JobManager(tmp_path).get("abc123")
    assert job.state == "failed" and "interrupted" in job.error and job.finished_at
    assert json.loads((tmp_path / "abc123.json").read_text())["state"] == "failed"  # recorded, not recomputed


def test_a_job_another_worker_runs_reads_back_as_running_until_its_process_ends(tmp_path):
    """`cqa serve --workers N`: GET /jobs/{id} answered by a worker that did not start the job reads its file. While
    the worker that runs it lives, the job is running, not interrupted (it had read back as failed, and that worker's
    client saw a job fail that went on to succeed); once that process is gone, it reads back as interrupted."""
    import socket
    import subprocess
    import sys
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # the worker that runs it
    try:
        (tmp_path / "abc123.json").write_text(json.dumps(
            {"id": "abc123", "kind": "erasure", "state": "running", "stage": "build", "progress": 0.3,
             "created_at": 1.0, "started_at": 2.0, "finished_at": None, "result": None, "error": None,
             "owner": f"{socket.gethostname()}:{other.pid}"}))
        jobs = JobManager(tmp_path)
        assert jobs.get("abc123").state == "running" and jobs.get("abc123").error is None
        assert json.loads((tmp_path / "abc123.json").read_text())["state"] == "running"  # nothing written over it
    finally:
        other.kill()
        other.wait()
    job = jobs.get("abc123")
    assert job.state == "failed" and "interrupted" in job.error
