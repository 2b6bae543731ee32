"""What a process pays to load the MiniLM models before it can rank: each MiniLM checkpoint the rerankers serve
(cross-encoder, bi-encoder, question-bi-encoder) and the package's network with its tokenizer, each load in a fresh
Python process, side by side:

- ``project``: indexing/bert.py's network and tokenizer, as every server, worker and CLI command loads them;
- ``transformers``: the reference, the same weights in transformers' ``BertModel`` and fast tokenizer (what the
  project loaded before round 34);
- ``torch``: ``import torch`` alone, the floor of both;

and a forward pass of each network on one padded batch, interleaved in this process (the same speed, the same
output to the bit).

Then ``cqa serve`` on a data folder with a live generation, until ``GET /ready`` (the served path: a restart, a new
worker), and its resident memory after one ``POST /search`` (None off Linux). Prints a JSON object last.

    python bench/model_load.py [--repeats 3] [--data-dir DEMO] [--serve-only]
    python bench/model_load.py --forward-only cuda   # the forward passes alone, on a GPU
"""
from __future__ import annotations

import argparse
import json
import statistics
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from load import post_json, resident_mb, server  # noqa: E402

MODELS = ("cross-encoder", "bi-encoder", "question-bi-encoder")
CODE = {
    "torch": "import torch",
    "project": """
from pathlib import Path
import torch
from indexing.bert import BertModel, WordPieceTokenizer
from indexing.encoder import model_path
from ranking.neural.minilm import load
for m in {models}:
    load(Path('models') / m)
BertModel.from_pretrained(model_path()); WordPieceTokenizer(model_path()).ids(['visa'], 128, True)
import sys; assert 'transformers' not in sys.modules, 'the project path imported transformers'
""",
    "transformers": """
import os; os.environ['HF_HUB_OFFLINE'] = '1'
from pathlib import Path
import torch
from transformers import AutoTokenizer, BertConfig, BertModel
from safetensors.torch import load_file
from indexing.encoder import model_path
for m in {models}:
    net = BertModel(BertConfig.from_pretrained(model_path()), add_pooling_layer=False)
    state = {{k.removeprefix('bert.'): v.float() for k, v in load_file(str(Path('models') / m / 'model.safetensors')).items()}}
    net.load_state_dict(state, strict=False)
BertModel.from_pretrained(model_path(), add_pooling_layer=False); AutoTokenizer.from_pretrained(model_path())(['visa'])
""",
}


def timed(code: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True)
    return time.perf_counter() - t0


def forward_ms(rounds: int, device: str = "cpu", shape: tuple[int, int] = (32, 160), bf16: bool = False) -> dict:
    """Both networks (the package's weights) on one padded batch of ``shape`` word pieces (every other row padded
    from three quarters on), interleaved, on ``device`` (in bf16 autocast with ``bf16``, as a MiniLM ranker runs in
    torch-bf16): median ms of a forward pass each, and whether their outputs are equal to the bit."""
    import torch
    from transformers import BertModel as Reference

    from indexing.bert import BertModel
    from indexing.encoder import model_path
    ref = Reference.from_pretrained(model_path(), add_pooling_layer=False).eval().to(device)
    ours = BertModel.from_pretrained(model_path()).eval().to(device)
    ids = torch.randint(1000, 20000, shape, generator=torch.Generator().manual_seed(0)).to(device)
    mask = torch.ones_like(ids)
    mask[::2, shape[1] * 3 // 4:] = 0
    runs = {"project": lambda: ours(ids, mask), "transformers": lambda: ref(input_ids=ids, attention_mask=mask)[0]}
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    times: dict = {k: [] for k in runs}
    with torch.no_grad(), torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16, enabled=bf16):
        equal = torch.equal(runs["project"](), runs["transformers"]())
        for _ in range(3):  # warm-up (CUDA kernels, allocator)
            for run in runs.values():
                run()
        for _ in range(rounds):
            for k, run in runs.items():
                sync()
                t0 = time.perf_counter()
                run()
                sync()
                times[k].append(time.perf_counter() - t0)
    med = {k: round(statistics.median(v) * 1000, 3) for k, v in times.items()}
    return {"device": device, "shape": list(shape), "bf16": bf16, "median_ms": med,
            "transformers_over_project": round(med["transformers"] / med["project"], 3), "equal": equal,
            "rounds": rounds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--data-dir", type=Path, default=None,
                    help="a data folder with a live generation (default: the demo corpus, ingested and indexed here)")
    ap.add_argument("--serve-only", action="store_true",
                    help="only the served start (to run this bench in an older tree, whose project path imports "
                         "transformers)")
    ap.add_argument("--forward-only", metavar="DEVICE",
                    help="only the two networks' forward passes, on DEVICE (cpu, cuda), in fp32 and bf16 autocast, on "
                         "a thread's batch (10 x 128) and a larger one (32 x 160): no checkpoint or data folder needed")
    args = ap.parse_args()
    if args.forward_only:
        import torch
        print(json.dumps({"bench": "model_load", "forward": [
            forward_ms((100 if args.forward_only.startswith("cuda") else 5) * args.repeats, args.forward_only, shape, bf16)
            for bf16 in (False, True) for shape in ((10, 128), (32, 160))],
            "torch": torch.__version__, "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None}))
        return
    out: dict = {"bench": "model_load", "models": list(MODELS), "repeats": args.repeats, "seconds": {}}
    if not args.serve_only:
        for _ in range(args.repeats):  # interleaved, so a slow moment of the machine falls on both
            for name, code in CODE.items():
                out["seconds"].setdefault(name, []).append(round(timed(code.format(models=MODELS)), 2))
        med = {k: statistics.median(v) for k, v in out["seconds"].items()}
        out["median_s"] = med
        out["transformers_over_project"] = round(med["transformers"] / med["project"], 2)
        out["above_torch_s"] = {k: round(med[k] - med["torch"], 2) for k in ("project", "transformers")}
        out["forward"] = forward_ms(10 * args.repeats)
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data_dir
        if data is None:
            data = Path(tmp) / "var"
            env = {"CQA_DATA_DIR": str(data), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
            for cmd in (["ingest", "data/demo/threads.jsonl"], ["reindex"]):
                subprocess.run([sys.executable, "-m", "app.cli", *cmd], cwd=ROOT, env={**os.environ, **env},
                               check=True, capture_output=True)
        ready, rss = [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            with server(data, {}) as (base, _):
                ready.append(round(time.perf_counter() - t0, 2))
                status, _ = post_json(base + "/search", {"question": {"subject": "visa", "body": "where to renew it"}})
                if status != 200:
                    raise SystemExit(f"POST /search answered {status}")
                rss.append(resident_mb(base))
        out["serve_to_ready_s"] = ready
        out["serve_to_ready_median_s"] = statistics.median(ready)
        out["serve_resident_mb_after_a_search"] = rss
    print(json.dumps(out))


if __name__ == "__main__":
    main()
