"""``POST /imports``' job: each upload the service received (``indexing.imports``) ingested by ``cqa ingest`` in a
child process, as an operator on the machine would run it: a stream a batch at a time, its texts encoded ahead into
the embedding cache at the automatic refresh's CPU priority (``--encode auto --nice CQA_REFRESH_NICE``), so searches
come first, and the refresh then takes the threads in. One import at a time per data folder (a lock file, held from
the upload's first byte to its ingest's end, by any worker, and by the child it runs: a service killed mid-import
leaves the lock held until its child has ended, which it does with the service)."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path

from indexing.imports import ImportLock, done_with, imports_folder, options_of, pending

from .bootstrap import child_command
from .cli import EXIT_WITH
from .settings import Settings

log = logging.getLogger(__name__)


def run_imports(settings: Settings, lock: ImportLock, progress) -> dict:
    """Every pending upload ingested, oldest first, then the lock released. An upload is deleted once its ingest
    ended: done (exit 0), done with the mirror's removal refused (3, the reason kept), or refused as a file (2, the
    error kept: send a mended file). One cut off (the child killed) is kept and ingested again at the next start.
    The job's progress is the child's (``cqa ingest --progress-json``): each upload counting alike, its stage the
    upload's name and the threads written of it."""
    try:
        done = []
        uploads = pending(imports_folder(settings.data_dir))
        for i, upload in enumerate(uploads):
            def told(at: dict, i=i, upload=upload) -> None:
                share = float(at.get("overall", 0.0))
                progress(f"{upload.name}: {at.get('threads', 0)} threads written, {share:.0%} read",
                         (i + share) / len(uploads))
            progress(f"{upload.name}: starting", i / len(uploads))
            done.append(_ingest(settings, upload, lock, told))
        failed = [d for d in done if d["exit"] not in (0, 3)]
        if failed:
            raise RuntimeError("; ".join(f"{d['upload']}: {d['error']}" for d in failed))
        return {"imports": done}
    finally:
        lock.release()


def _ingest(settings: Settings, upload: Path, lock: ImportLock, told: Callable[[dict], None]) -> dict:
    """``cqa ingest`` of one upload in a child process. The child is given the import lock, so no other ingest starts
    while it runs, even after this process has gone; and it ends with this process (``cli.EXIT_WITH``), so a service
    killed mid-import leaves no ingest running that its restart would run beside."""
    options = options_of(upload)
    cmd, env = child_command(settings, "ingest", str(upload), "-q", "--progress-json", "--encode", "auto", "--nice",
                             str(settings.refresh_nice), *options.args())
    log.info("import: %s", " ".join(cmd[2:]))
    held = lock.fileno()
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          pass_fds=(held,) if held is not None else (),
                          env={**env, EXIT_WITH: str(os.getpid())}) as child:
        stdout: list[str] = []
        reader = threading.Thread(target=lambda: stdout.extend(child.stdout), daemon=True)  # the summary
        reader.start()
        errors: deque[str] = deque(maxlen=50)  # its last words: a file of bad records logs one line each
        for line in child.stderr:  # the progress lines as they come; the rest is what the command said
            if line.startswith('{"progress"'):
                try:
                    told(json.loads(line)["progress"])
                    continue
                except (ValueError, KeyError, TypeError):
                    pass
            if line.strip():
                errors.append(line.rstrip("\n"))
        child.wait()
        reader.join()
    out = {"upload": upload.name, "exit": child.returncode, "options": options.args()}
    lines = "".join(stdout).strip().splitlines()
    if lines:
        try:
            out["summary"] = json.loads(lines[-1])
        except ValueError:
            pass
    if child.returncode == 3:
        out["mirror_refused"] = errors[-1] if errors else "see the service's log"
    elif child.returncode != 0:
        out["error"] = " ".join(list(errors)[-3:]) or f"cqa ingest exited with status {child.returncode}"
    if child.returncode in (0, 2, 3):  # its ingest is over, whatever it said: a refused file would be refused again
        done_with(upload)
    else:
        log.error("import of %s cut off (status %d); kept, and ingested again at the next start: %s", upload.name,
                  child.returncode, out["error"])
    return out


__all__ = ["run_imports"]
