"""Automatic refresh (``$CQA_REFRESH_S``): a thread accepted by POST /threads, ``cqa ingest`` or a DELETE becomes
searchable (or stops being found) without anyone calling POST /reindex.

Every ``$CQA_GENERATION_POLL_S`` a serving process reads the store's change counter (one row). When it moved, or the
live generation did, it compares the store's fingerprint with the one the live generation recorded. When they differ, it
runs ``cqa reindex --if-stale`` in a child process (started ahead, its imports done, and told to build:
``$CQA_REFRESH_PRESTART``), at a lower CPU priority than its own (``$CQA_REFRESH_NICE``), as a
job of kind ``reindex`` (so POST /reindex meanwhile answers 409 with that job): at once when its last build ended at
least the gap ago, else when the gap has passed. The gap is the last build's length times ``1 / $CQA_REFRESH_DUTY - 1``
(so building takes at most that share of the time), at most ``$CQA_REFRESH_S``. The child takes the data folder's
reindex lock and checks again under it, so the workers of ``--workers N`` and any ``cqa reindex`` agree on one build;
the others' children exit at once with ``skipped``. What the child encodes comes from the embedding cache for every text
seen before, so a refresh encodes only the new texts. The process goes live on the new generation as soon as the child
ends; the others follow it within ``$CQA_GENERATION_POLL_S``.

A change the store has accepted is never lost by a refresh: a refresh that fails or is killed leaves the live
generation as it was, and the next tick tries again (also after a restart, which finds the store ahead of the live
generation).

A write this process makes (POST /threads, a DELETE) does not wait for the poll: it wakes the follower, which ticks at
once (``Service.nudge``, ``app.main.follow``)."""
from __future__ import annotations

import json
import logging
import math
import subprocess
import threading
import time

from indexing.generations import current_generation
from indexing.reindex import staleness

from .bootstrap import reindex_command
from .schemas import RefreshOut

log = logging.getLogger(__name__)


def refresh_gap(took_s: float, duty: float, longest_s: float) -> float:
    """Seconds from the end of an automatic build that took ``took_s`` to the start of the next: building then takes
    at most ``duty`` of the time (``$CQA_REFRESH_DUTY``; 0: always ``longest_s``), and never waits over
    ``longest_s`` (``$CQA_REFRESH_S``)."""
    if duty <= 0:
        return longest_s
    return round(min(longest_s, took_s * (1 / duty - 1)), 3)


def _tell(proc: subprocess.Popen) -> None:
    """Tell a waiting build process (`cqa reindex --when-told`) to build: a line, then the end of its input."""
    proc.stdin.write("build\n")
    proc.stdin.close()


def _end(proc: subprocess.Popen) -> None:
    """End a waiting build process that is not to build: the end of its input (it exits without building), killed
    if it does not within 10 s; its pipes closed."""
    try:
        proc.stdin.close()
        proc.wait(timeout=10)
    except (OSError, subprocess.TimeoutExpired):  # a broken pipe (it ended), or it did not end
        proc.kill()
        proc.wait()
    proc.stdout.close()


class Refresher:
    """One per serving process. ``tick`` is cheap and is called every ``$CQA_GENERATION_POLL_S``, and at once after a
    write of this process (``Service.nudge``). While it knows the store is ahead, a write costs it no fingerprint (a
    write that undoes the change is found by the child's own check: ``skipped``)."""

    def __init__(self, svc):
        self.svc = svc
        self.report = RefreshOut(interval_s=svc.settings.refresh_s, gap_s=svc.settings.refresh_s,
                                 pending=False)  # what GET /ready says of it
        self._seen: tuple[int, str | None] | None = None  # (store change count, live generation) last compared
        self._last_end = -math.inf  # monotonic time the last build of this process ended
        self._lock = threading.Lock()  # the follower's ticks and the build's end both compare
        self._spare: subprocess.Popen | None = None  # the next build's process, waiting ($CQA_REFRESH_PRESTART)
        self._spare_lock = threading.Lock()
        self.prestart()

    def _spawn(self) -> subprocess.Popen:
        """A build's process (`cqa reindex --if-stale --when-told`), waiting for the line that tells it to build."""
        settings = self.svc.settings
        flags = ["--if-stale", "--nice", str(settings.refresh_nice), "--when-told"]
        argv, env = reindex_command(settings, *flags, *(["--translation-later"] if settings.refresh_translation_later
                                                        else []))
        return subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def prestart(self) -> None:
        """Start the next build's process now, unless one waits already or ``$CQA_REFRESH_PRESTART`` is off: it
        imports what a build needs at its own CPU priority and waits to be told, so a change does not wait for
        that."""
        if not self.svc.settings.refresh_prestart:
            return
        with self._spare_lock:
            if self._spare is not None and self._spare.poll() is not None:  # it ended on its own: its pipes closed
                _end(self._spare)
                self._spare = None
            if self._spare is None:
                self._spare = self._spawn()
            self.report.spare_pid = self._spare.pid

    def _take_spare(self) -> subprocess.Popen | None:
        with self._spare_lock:
            spare, self._spare = self._spare, None
            self.report.spare_pid = None
        return spare

    def _child(self) -> tuple[subprocess.Popen, str]:
        """The build's process, told to build: the spare when one waits (``prestarted``), else a new one
        (``started``)."""
        spare = self._take_spare()
        if spare is not None:
            if spare.poll() is None:
                try:
                    _tell(spare)
                    return spare, "prestarted"
                except OSError:  # it ended meanwhile (a broken pipe)
                    pass
            _end(spare)  # ended: a new one
        child = self._spawn()
        _tell(child)
        return child, "started"

    def close(self) -> None:
        """End the spare process (the end of its input: it exits without building)."""
        spare = self._take_spare()
        if spare is not None:
            _end(spare)

    def _compare(self, force: bool = False) -> None:
        """Compare the store with the live generation when either moved since the last comparison (or ``force``),
        and say so in the report."""
        settings, store, r = self.svc.settings, self.svc.store, self.report
        with self._lock:
            seen = (store.change_count(), current_generation(settings.index_root))
            if seen == self._seen and not force:
                return
            known_behind = r.behind == "store" and self._seen is not None and seen[1] == self._seen[1]
            self._seen = seen
            if known_behind and not force:
                return  # the store known ahead, still on the same generation: more writes change nothing here
            # no live generation yet is the first start's business (bootstrap, `cqa reindex`), not a refresh's
            stale = staleness(settings, store) if seen[1] is not None else None
            r.pending, r.reason = stale is not None, stale.reason if stale else None
            r.behind = stale.behind if stale else None
            r.pending_since = (r.pending_since or time.time()) if stale else None
            self.svc.metrics.refresh_pending_since.set(r.pending_since or 0)

    def tick(self) -> bool:
        """Compare the store with the live generation when either moved; start a build when they differ and the
        gap allows. True when it started one."""
        r = self.report
        self._compare()
        if not r.pending or time.monotonic() - self._last_end < r.gap_s:
            return False
        job, started = self.svc.jobs.submit("reindex", self._build)
        if started:
            r.last_job, r.last_started_at, r.last_outcome, r.last_error = job.id, time.time(), "running", None
            log.info("automatic refresh: %s; building a new generation (job %s)", r.reason, job.id)
        return started

    def _went_live(self, line: str) -> str | None:
        """A line of the child's saying its first generation is live (``--translation-later``): serve it now, not
        when the child ends. Returns the generation this process then serves."""
        try:
            said = json.loads(line)
        except ValueError:
            return None
        if not (isinstance(said, dict) and "live" in said and "generation" not in said):
            return None
        try:
            self.svc.follow_current()
        except Exception as e:  # noqa: BLE001 - the child's end or the next poll goes live instead
            log.warning("could not go live on %s: %s", said["live"], e)
            return None
        log.info("automatic refresh: live on %s (%.1f s); its translation table follows", said["live"],
                 said.get("seconds", 0))
        return self.svc.generation.name if self.svc.generation is not None else None

    def _build(self, progress) -> dict:
        try:
            return self._build_once(progress)
        finally:  # the next build's process, started once this one's generation is live (its imports not meanwhile)
            try:
                self.prestart()
            except OSError as e:
                log.warning("automatic refresh: could not start the next build's process: %s", e)

    def _build_once(self, progress) -> dict:
        r = self.report
        progress("refresh: cqa reindex --if-stale in a child process", 0.0)
        settings = self.svc.settings
        lines: list[str] = []
        early = None  # the generation this process served while the child trained the translation table
        started = time.monotonic()
        try:
            child, how = self._child()
            with child:  # its log: this stderr
                for line in child.stdout:
                    lines.append(line)
                    early = self._went_live(line) or early
        finally:
            self._last_end = time.monotonic()
            r.gap_s = refresh_gap(self._last_end - started, settings.refresh_duty, settings.refresh_s)
            r.last_finished_at = time.time()
        try:
            if child.returncode != 0:
                raise RuntimeError(f"`cqa reindex --if-stale` exited with status {child.returncode} (its log is on "
                                   "the service's stderr); the live generation is unchanged, the next tick tries again")
            summary = json.loads("".join(lines).strip().splitlines()[-1])
        except Exception as e:
            r.last_outcome, r.last_error = "failed", str(e)
            self.svc.metrics.refreshes.labels("failed").inc()
            self._seen = None  # compare again at the next tick
            raise
        outcome = "skipped" if "skipped" in summary else "built"
        if outcome == "built":
            self.svc.follow_current()  # live in this process now; the others follow within the poll interval
            r.pending_since = None  # what it saw is built: a change written meanwhile is pending from now
            self._compare(force=True)  # so the report says "built" only beside what is pending after it
            log.info("automatic refresh: live on %s (%.1f s)", summary.get("generation"), summary.get("seconds", 0))
        else:
            self._seen = None  # another process built, or had: compare again at the next tick
        r.last_generation = summary.get("generation")
        r.last_outcome = outcome
        self.svc.metrics.refreshes.labels(outcome).inc()
        return {"trigger": "refresh", "child": how, **summary,
                **({"served_before_translation": early} if early else {})}
