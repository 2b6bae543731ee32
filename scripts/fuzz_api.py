"""Schemathesis over the service's own OpenAPI schema with the default rankers (real weights), a heavier run than the
suite's (tests/test_api.py fuzzes with stub rankers, 15 cases per operation): random cases for every operation but the
long jobs (POST /reindex, /evaluation, /backups), each response checked for a 5xx. Serves the data folder
$CQA_DATA_DIR as it is (build one first, e.g. `cqa ingest data/demo/threads.jsonl && cqa reindex`); POST and DELETE
/threads write to it, so use a scratch folder.

    CQA_DATA_DIR=/tmp/fuzz/var python scripts/fuzz_api.py --examples 300

Prints each operation's count and seconds, then a JSON object: cases per operation and every 5xx (at most 30)."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

LONG_JOBS = ("/reindex", "/evaluation", "/backups")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--examples", type=int, default=100, help="cases per operation")
    args = ap.parse_args()
    import schemathesis
    from fastapi.testclient import TestClient
    from hypothesis import HealthCheck, given
    from hypothesis import settings as hsettings

    from app.main import create_app
    from app.settings import Settings
    token = "fuzz-token"
    failures, calls = [], {}
    with TestClient(create_app(Settings(api_token=token)), raise_server_exceptions=False) as client:
        schema = schemathesis.openapi.from_asgi("/openapi.json", client.app)
        for op in schema.get_all_operations():
            o = op.ok()
            if o.path in LONG_JOBS and o.method.upper() == "POST":
                continue
            name, t0 = f"{o.method.upper()} {o.path}", time.perf_counter()

            @hsettings(max_examples=args.examples, deadline=None, suppress_health_check=list(HealthCheck))
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
