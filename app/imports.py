"""``POST /imports``' job: each upload the service received (``indexing.imports``) ingested by ``cqa ingest`` in a
child process, as an operator on the machine would run it: a stream a batch at a time, its texts encoded ahead into
the embedding cache at the automatic refresh's CPU priority (``--encode auto --nice CQA_REFRESH_NICE``), so searches
come first, and the refresh then takes the threads in. One import at a time per data folder (a lock file, held from
the upload's first byte to its ingest's end, by any worker)."""
from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

from indexing.imports import ImportLock, done_with, imports_folder, options_of, pending

from .settings import Settings

log = logging.getLogger(__name__)


def run_imports(settings: Settings, lock: ImportLock, progress) -> dict:
    """Every pending upload ingested, oldest first, then the lock released. An upload is deleted once its ingest
    ended: done (exit 0), done with the mirror's removal refused (3, the reason kept), or refused as a file (2, the
    error kept: send a mended file). One cut off (the child killed) is kept and ingested again at the next start."""
    try:
        done = []
        uploads = pending(imports_folder(settings.data_dir))
        for i, upload in enumerate(uploads):
            progress(upload.name, i / max(len(uploads), 1))
            done.append(_ingest(settings, upload))
        failed = [d for d in done if d["exit"] not in (0, 3)]
        if failed:
            raise RuntimeError("; ".join(f"{d['upload']}: {d['error']}" for d in failed))
        return {"imports": done}
    finally:
        lock.release()


def _ingest(settings: Settings, upload: Path) -> dict:
    options = options_of(upload)
    cmd = [sys.executable, "-m", "app.cli", "--data-dir", str(settings.data_dir), "ingest", str(upload), "-q",
           "--encode", "auto", "--nice", str(settings.refresh_nice), *options.args()]
    log.info("import: %s", " ".join(cmd[2:]))
    p = subprocess.run(cmd, capture_output=True, text=True)
    out = {"upload": upload.name, "exit": p.returncode, "options": options.args()}
    lines = p.stdout.strip().splitlines()
    if lines:
        try:
            out["summary"] = json.loads(lines[-1])
        except ValueError:
            pass
    errors = [line for line in p.stderr.strip().splitlines() if line.strip()]
    if p.returncode == 3:
        out["mirror_refused"] = errors[-1] if errors else "see the service's log"
    elif p.returncode != 0:
        out["error"] = " ".join(errors[-3:]) or f"cqa ingest exited with status {p.returncode}"
    if p.returncode in (0, 2, 3):  # its ingest is over, whatever it said: a refused file would be refused again
        done_with(upload)
    else:
        log.error("import of %s cut off (status %d); kept, and ingested again at the next start: %s", upload.name,
                  p.returncode, out["error"])
    return out


__all__ = ["run_imports"]
