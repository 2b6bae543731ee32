"""Background jobs (reindex, evaluation): one worker thread at a time, state kept in memory and in
a JSON file per job so a restart still answers GET /jobs/{id} for finished ones. A job keeps the id of the request that
submitted it (``app.access``), and each line it logs carries that id."""
from __future__ import annotations

import contextvars
import json
import logging
import os
import socket
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from .access import request_id

log = logging.getLogger(__name__)


@dataclass
class Job:
    id: str
    kind: str
    state: str = "queued"  # queued, running, succeeded, failed
    stage: str | None = None
    progress: float = 0.0
    created_at: float = field(default_factory=time.time)
    started_at: float | None = None
    finished_at: float | None = None
    result: dict | None = None
    error: str | None = None
    owner: str | None = None  # host:pid of the process that runs it (``cqa serve --workers N`` runs N processes)
    request_id: str | None = None  # the request that submitted it (its X-Request-ID): its log lines carry it too


def _this_process() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _alive(owner: str | None) -> bool:
    """Whether the process ``owner`` (host:pid) still runs: a job another worker of this host runs is not interrupted.
    A job of another host counts as alive (this process cannot tell); one with no owner (older files) as stopped."""
    host, _, pid = (owner or "").rpartition(":")
    if not pid.isdigit():
        return False
    return host != socket.gethostname() or process_alive(int(pid))


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host runs (another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class JobManager:
    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()
        self._busy: dict[str, str] = {}  # kind -> running job id

    def submit(self, kind: str, fn: Callable[[Callable[[str, float], None]], dict]) -> tuple[Job, bool]:
        """Start ``fn`` in a thread unless a job of this kind runs; returns (job, started)."""
        with self._lock:
            running = self._busy.get(kind)
            if running:
                return self._jobs[running], False
            job = Job(id=uuid.uuid4().hex[:12], kind=kind, owner=_this_process(), request_id=request_id())
            self._jobs[job.id] = job
            self._busy[kind] = job.id
        self._save(job)
        context = contextvars.copy_context()  # the request's id, for what the job logs
        threading.Thread(target=context.run, args=(self._run, job, fn), name=f"job-{kind}", daemon=True).start()
        return job, True

    def running(self, kind: str) -> Job | None:
        """The job of ``kind`` that runs now, if any."""
        with self._lock:
            running = self._busy.get(kind)
            return self._jobs[running] if running else None

    def _run(self, job: Job, fn) -> None:
        def progress(stage: str, frac: float) -> None:
            job.stage, job.progress = stage, round(float(frac), 3)

        job.state, job.started_at = "running", time.time()
        self._save(job)
        try:
            done = {"result": fn(progress), "state": "succeeded", "progress": 1.0}
        except Exception as e:  # a failed job is reported, never raised into the server
            log.error("job %s (%s) failed: %s\n%s", job.id, job.kind, e, traceback.format_exc())
            done = {"state": "failed", "error": f"{type(e).__name__}: {e}"}
        done["finished_at"] = time.time()
        self._save(replace(job, **done))  # on disk before any reader can see the job finished
        for key, value in done.items():
            setattr(job, key, value)
        with self._lock:
            self._busy.pop(job.kind, None)

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            job = self._jobs.get(job_id)
        if job is not None:
            return job
        path = self.folder / f"{job_id}.json"
        if not (job_id.isalnum() and path.exists()):
            return None
        job = Job(**json.loads(path.read_text()))
        if job.state in ("queued", "running") and not _alive(job.owner):  # on disk, and its process stopped
            job.state, job.finished_at = "failed", job.finished_at or time.time()
            job.error = "interrupted: the service stopped before this job finished; submit it again"
            self._save(job)
        return job

    def _save(self, job: Job) -> None:
        tmp = self.folder / f".{job.id}.{uuid.uuid4().hex[:8]}.tmp"  # its own: two writers never share one
        tmp.write_text(json.dumps(asdict(job), default=str))
        os.replace(tmp, self.folder / f"{job.id}.json")
