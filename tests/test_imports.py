"""``POST /imports``' job (``app.imports``) and the child ``cqa ingest`` it runs: the child holds the import lock as long
as it runs, tells its progress, and ends with the service that started it. (The HTTP side is in test_api.py.)"""
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from app.imports import _ingest
from app.settings import Settings
from indexing.imports import ImportLock, ImportOptions, Upload, import_running, imports_folder, pending
from indexing.store import ThreadStore

from .conftest import ROOT

SERVICE = """
import sys
from pathlib import Path
from app.imports import run_imports
from app.settings import Settings
from indexing.store import ThreadStore
from indexing.imports import ImportLock, imports_folder
settings = Settings(data_dir=Path(sys.argv[1]))
lock = ImportLock(imports_folder(settings.data_dir))
assert lock.held
run_imports(settings, lock, lambda stage, share: None)
"""


def _upload(data_dir: Path, n: int) -> Path:
    upload = Upload(imports_folder(data_dir), 10**9)
    upload.write(b"".join(json.dumps({"id": f"u{k}", "subject": f"uploaded question {k}",
                                      "answers": [{"id": f"u{k}a", "text": "an answer"}]}).encode() + b"\n"
                          for k in range(n)))
    return upload.finish(ImportOptions())


def _children_reading(name: str) -> list[int]:
    """The processes whose command line names ``name`` (the child ``cqa ingest`` of that upload), zombies left out."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if name.encode() in (proc / "cmdline").read_bytes() and \
                    (proc / "stat").read_text().rpartition(")")[2].split()[0] != "Z":
                found.append(int(proc.name))
        except OSError:  # gone meanwhile
            pass
    return found


def _wait_for_child(name: str, timeout: float = 60) -> int:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pids := _children_reading(name):
            return pids[0]
        time.sleep(0.02)
    raise AssertionError(f"no child process ingests {name}")


def test_an_imports_child_holds_the_lock_until_it_ends_and_tells_its_progress(tmp_path, monkeypatch):
    """The service may let go of the import lock (it is killed): the child it gave the lock to still holds it, so no
    second ingest starts beside it; the lock is free once the child ends. Its progress lines reach the job, and it
    writes into the service's data folder whatever the environment names."""
    settings = Settings(data_dir=tmp_path / "var")
    monkeypatch.setenv("CQA_DATA_DIR", str(tmp_path / "elsewhere"))
    folder = imports_folder(settings.data_dir)
    named = _upload(settings.data_dir, 3000)
    lock = ImportLock(folder)
    assert lock.held
    told, out = [], []
    job = threading.Thread(target=lambda: out.append(_ingest(settings, named, lock, told.append)))
    job.start()
    _wait_for_child(named.name)
    lock.release()  # this process's hold is gone; the child's is not
    assert import_running(folder) and not ImportLock(folder).held
    job.join(timeout=300)
    assert not import_running(folder)
    (done,) = out
    assert done["exit"] == 0 and done["summary"]["inserted"] == 3000, done
    assert [t["threads"] for t in told] == [2000, 3000, 3000] and told[-1]["overall"] == 1.0, told
    assert pending(folder) == []
    with ThreadStore(settings.store_path) as store:
        assert store.counts() == {"threads": 3000, "answers": 3000}
    assert not (tmp_path / "elsewhere").exists()


def test_an_imports_child_ends_with_the_service_killed_mid_import(tmp_path, cli_env):
    """kill -9 of the service mid-import ends its child ingest too (a restarted service ingests the upload again,
    never beside it): the lock is then free and the upload kept, to be ingested at the next start. The child is
    stopped (SIGSTOP) before the kill, so only the signal it gets as the service dies can end it: not a write to the
    service's closed pipe, nor the end of its work."""
    data_dir = tmp_path / "var"
    named = _upload(data_dir, 3000)
    service = subprocess.Popen([sys.executable, "-c", SERVICE, str(data_dir)], env=cli_env, cwd=ROOT)
    child = None
    try:
        child = _wait_for_child(named.name)
        store = Settings(data_dir=data_dir).store_path
        deadline = time.time() + 60
        while not store.exists() and time.time() < deadline:  # the command has started: past its first lines
            time.sleep(0.02)
        os.kill(child, signal.SIGSTOP)
        assert import_running(imports_folder(data_dir))
        service.kill()
        service.wait(timeout=30)
        deadline = time.time() + 30
        while (child in _children_reading(named.name) or import_running(imports_folder(data_dir))) and \
                time.time() < deadline:  # its files are closed a moment after its command line is
            time.sleep(0.05)
        assert _children_reading(named.name) == [], "the child ingest outlived the service"
        assert not import_running(imports_folder(data_dir)) and pending(imports_folder(data_dir)) == [named]
    finally:
        service.kill()
        for pid in _children_reading(named.name):
            os.kill(pid, signal.SIGKILL)


def test_a_dump_archive_sent_over_http_is_ingested_with_its_duplicate_links(tmp_path):
    """POST /imports of a site's dump as it publishes it (a .7z): the upload is kept as a .7z, and its ingest gives
    the threads with the duplicate links of the archive's PostLinks.xml (a Posts.xml sent alone has none)."""
    import py7zr

    from app.imports import run_imports
    from indexing.loaders import load
    from scripts.make_stackexchange_dump import write_dump
    demo = load(ROOT / "data" / "demo" / "threads.jsonl").threads
    write_dump(demo, tmp_path / "dump", duplicates={demo[1].id: [demo[0].id]})
    with py7zr.SevenZipFile(tmp_path / "site.7z", "w") as z:
        for f in sorted((tmp_path / "dump").iterdir()):
            z.write(f, arcname=f.name)
    settings = Settings(data_dir=tmp_path / "var")
    folder = imports_folder(settings.data_dir)
    upload = Upload(folder, 10**9)
    upload.write((tmp_path / "site.7z").read_bytes())
    named = upload.finish(ImportOptions(strict=True))
    assert named.name.endswith(".7z") and pending(folder) == [named]
    lock = ImportLock(folder)
    (done,) = run_imports(settings, lock, lambda stage, share: None)["imports"]
    assert done["exit"] == 0 and done["summary"]["inserted"] == 33, done
    assert pending(folder) == [] and not import_running(folder)
    with ThreadStore(settings.store_path) as store:
        assert store.counts()["threads"] == 33 and store.get(demo[1].id).meta["duplicate_of"] == [demo[0].id]


def test_an_archive_that_is_not_one_dump_is_refused_before_it_is_accepted(tmp_path):
    """An upload that is an archive is checked by its list of members before it is named: one that is not a
    StackExchange dump's (no Posts.xml, or a damaged archive) is refused (415) with what it holds, and not kept."""
    import zipfile

    from indexing.imports import UploadError
    folder = imports_folder(tmp_path / "var")
    with zipfile.ZipFile(tmp_path / "photos.zip", "w") as z:
        z.writestr("holiday.jpg", b"\xff\xd8")
    for body, why in (((tmp_path / "photos.zip").read_bytes(), "holds no Posts.xml"),
                      (b"7z\xbc\xaf\x27\x1c" + b"\x00" * 40, "cannot read it")):
        upload = Upload(folder, 10**6)
        upload.write(body)
        try:
            upload.finish(ImportOptions())
            raise AssertionError("accepted")
        except UploadError as e:
            assert e.status == 415 and "not one StackExchange dump" in e.message and why in e.message, e.message
        upload.abort()
    assert pending(folder) == [] and [p.name for p in folder.iterdir()] == []
