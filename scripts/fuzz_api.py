"""Schemathesis over the service's own OpenAPI schema with the default rankers (real weights), a heavier run than the
suite's (tests/test_api.py fuzzes with stub rankers, 15 cases per operation): random cases for every operation but the
long jobs (POST /reindex, /evaluation, /backups), each response checked for a 5xx. The writing operations (POST,
PATCH and DELETE /threads...) write to the data folder it serves, so it serves a scratch one: --data-dir, built from
the demo corpus (`cqa ingest` and `cqa reindex`) when it holds no store yet, or by default a temporary folder so built
and removed after the run. It never serves $CQA_DATA_DIR or ./var unless named.

    python scripts/fuzz_api.py --examples 300

Prints each operation's count and seconds, then a JSON object: cases per operation and every 5xx (at most 30)."""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LONG_JOBS = ("/reindex", "/evaluation", "/backups")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--examples", type=int, default=100, help="cases per operation")
    ap.add_argument("--data-dir", type=Path, default=None, help="the scratch data folder to serve (built from the demo "
                    "corpus if it holds no store); default: a temporary one")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="cqa-fuzz-") as tmp:
        fuzz(args.examples, args.data_dir or Path(tmp) / "var")


def scratch(folder: Path):
    """Settings over ``folder``, the demo corpus ingested and indexed there first when it holds no store."""
    from app.settings import Settings
    from indexing.ingest import ingest_paths
    from indexing.reindex import reindex
    from indexing.store import ThreadStore
    settings = Settings(data_dir=folder, api_token="fuzz-token", refresh_s=0)
    if not settings.store_path.exists():
        with ThreadStore(settings.store_path) as store:
            ingest_paths(store, [ROOT / "data/demo/threads.jsonl"], progress=False)
        reindex(settings, progress=False)
    return settings


def fuzz(examples: int, folder: Path) -> None:
    import schemathesis
    from fastapi.testclient import TestClient
    from hypothesis import HealthCheck, given
    from hypothesis import settings as hsettings

    from app.main import create_app
    settings = scratch(folder)
    token = settings.api_token
    failures, calls = [], {}
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        schema = schemathesis.openapi.from_asgi("/openapi.json", client.app)
        for op in schema.get_all_operations():
            o = op.ok()
            if o.path in LONG_JOBS and o.method.upper() == "POST":
                continue
            name, t0 = f"{o.method.upper()} {o.path}", time.perf_counter()

            @hsettings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck))
            @given(case=o.as_strategy())
            def check(case):
                resp = case.call(headers={"Authorization": f"Bearer {token}"})
                calls[name] = calls.get(name, 0) + 1
                if resp.status_code >= 500:
                    failures.append({"operation": name, "status": resp.status_code, "response": resp.text[:300],
                                     "body": repr(case.body)[:500]})
            check()
            print(name, calls.get(name), f"{time.perf_counter() - t0:.1f} s", flush=True)
    print(json.dumps({"cases": calls, "server_errors": failures[:30], "n_server_errors": len(failures)}))


if __name__ == "__main__":
    main()
