"""How the MiniLM rankers run at inference: a backend (torch, or an ONNX Runtime export) and a precision
(fp32, bf16, int8), chosen from what the device supports.

Torch stays the training and GPU path. On a CPU the choices are measured in ``bench/rerank_speed.py``
(docs/BENCHMARKS.md, "Inference backends"):

- ``torch-fp32``: the reference every other variant is tested against.
- ``torch-bf16``: bf16 autocast. Fast only where the CPU has bf16 matrix instructions (AVX512-BF16 or
  AMX); elsewhere it is emulated and several times slower than fp32, so it falls back to fp32 there.
- ``onnx-fp32``: the same graph exported to ONNX and run by ONNX Runtime.
- ``onnx-int8``: the ONNX export with dynamic int8 weights (per channel) and int8 activations quantised
  at run time by ONNX Runtime. It replaces torch's deprecated ``torch.ao`` dynamic quantisation, whose
  scores were further from fp32 (rank correlation 0.969 against 0.997 on 90 dev pairs in a trial run).

``auto`` picks, on CUDA, torch with bf16 autocast (as training does); on a CPU, ``CPU_DEFAULT``, torch-fp32,
except for the rankers cleared for bf16 (``auto_bf16``), which run torch-bf16 on a CPU with bf16 instructions. A
bi-encoder is the exception to both (``resolve(vectors=True)``, round 53): ``auto`` runs it in torch-fp32 everywhere,
the precision a reindex stores its vectors in, so that a thread the index holds is scored as one it does not.
Each faster CPU variant was measured against torch-fp32 on dev, with a budget of 0.005 MAP per subtask's
default ranker (docs/BENCHMARKS.md, "Inference variants" and "Round 22"):

- onnx-int8, on a 2-core CPU without bf16: 1.25x (cross-encoder) to 1.37x (bi-encoder) faster at 30
  candidates, -0.0016 dev-A, but -0.011 dev-B and -0.018 dev-C, where the bi-encoders' cosines carry the
  ranking;
- torch-bf16, on a 2-core CPU with AVX512-BF16 (2026-11-23): 1.69x faster for the /rerank cascade on a
  10-comment thread, the same dev-A and dev-B MAP, but -0.0098 dev-C. So it is not the default of every ranker,
  but (round 22) it is ``auto``'s choice on such a CPU for the subtask A default, the cascade, which loses nothing
  on dev and answers 1.2-1.45x sooner through a real server (``ranking.presets.RankerSpec.auto_bf16``; the B
  default gained nothing there, its candidates' vectors being stored); and (round 23, bf16 inputs padded to a
  multiple of 32 tokens, ``ranking.neural.ranker.pad_multiple``) for the C default, which then lost 0.0025 dev-C
  and answers 1.5x sooner where its comments are not indexed. Not on a CPU with AMX (round 36): there oneDNN is
  capped at its AVX512-BF16 kernels, so that a score does not move with its batch, and torch-bf16 is slower than
  torch-fp32 (``auto_bf16``). Since round 53 ``auto`` keeps every bi-encoder in torch-fp32 (``VECTORS_NOTE``): the
  cascade runs its cross-encoder in bf16 (dev-A 0.7451 against 0.7453 in fp32, 1.48x faster than fp32 through a real
  server), and the C default, which runs only bi-encoders, is torch-fp32 again.

Both are a setting away (``CQA_INFERENCE``, or ``NAME[VARIANT]`` per ranker). A variant the machine cannot run
falls back to one it can, and the reason is logged and kept in ``Resolved.note``.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

BACKENDS = ("torch", "onnx")
PRECISIONS = ("fp32", "bf16", "int8")
VARIANTS = ("torch-fp32", "torch-bf16", "onnx-fp32", "onnx-int8")
ALIASES = {"fp32": "torch-fp32", "bf16": "torch-bf16", "int8": "onnx-int8", "onnx": "onnx-fp32"}
CPU_DEFAULT = "torch-fp32"
CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")
# Bump when the exported graph or its quantisation changes: older exports are then never read. 2: traced from
# indexing/bert.py's BERT (round 34), not transformers' (the same ops; the version keeps the two exports apart).
EXPORT_VERSION = 2


class InferenceError(ValueError):
    """An inference variant that does not exist."""


@dataclass(frozen=True)
class Inference:
    backend: str = "torch"
    precision: str = "fp32"

    def __post_init__(self):
        if f"{self.backend}-{self.precision}" not in VARIANTS:
            raise InferenceError(f"no inference variant {self.backend}-{self.precision}; known: {', '.join(VARIANTS)}")

    @property
    def label(self) -> str:
        return f"{self.backend}-{self.precision}"

    @classmethod
    def parse(cls, text: str) -> "Inference":
        """``torch-fp32``, ``onnx-int8``... or a short alias (``int8``, ``bf16``, ``fp32``, ``onnx``)."""
        name = ALIASES.get(text, text)
        if name not in VARIANTS:
            raise InferenceError(f"unknown inference variant {text!r}; known: auto, {', '.join(VARIANTS)} "
                                 f"(aliases: {', '.join(f'{a}={v}' for a, v in ALIASES.items())})")
        backend, _, precision = name.partition("-")
        return cls(backend, precision)


@dataclass(frozen=True)
class Resolved:
    """What a ranker will run: the variant, on which device, and why, when it is not what was asked for."""
    inference: Inference
    device: str
    requested: str
    note: str = ""


def cpu_flags() -> dict[str, bool]:
    """The x86 features that decide whether bf16 and int8 have hardware behind them (Linux /proc/cpuinfo)."""
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        flags = set()
    return {f: f in flags for f in CPU_FLAGS}


def has_bf16(flags: dict[str, bool]) -> bool:
    return bool(flags.get("avx512_bf16") or flags.get("amx_bf16"))


def onnx_available() -> bool:
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def resolve(requested: str = "auto", device: str = "cpu", flags: dict[str, bool] | None = None,
            vectors: bool = False) -> Resolved:
    """The variant to run for ``requested`` (``auto`` or a variant) on ``device`` (``cpu`` or ``cuda``). ``vectors``:
    the model is a bi-encoder, whose vectors of comments and questions a reindex stores (``VECTORS_NOTE``): ``auto``
    runs it in torch-fp32 on every device."""
    if vectors and requested == "auto":
        return Resolved(Inference("torch", "fp32"), device, requested)
    flags = cpu_flags() if flags is None else flags
    if device == "cuda":
        # CUDA always runs torch with bf16 autocast; the ONNX variants are CPU variants.
        note = "" if requested in ("auto", "torch-bf16", "bf16") else f"{requested} is a CPU variant; CUDA runs torch-bf16"
        if requested != "auto":
            Inference.parse(requested)
        return _noted(Resolved(Inference("torch", "bf16"), device, requested, note))
    if requested == "auto":
        want = Inference.parse(CPU_DEFAULT)
    else:
        want = Inference.parse(requested)
    note = ""
    if want.precision == "bf16" and not has_bf16(flags):
        note = "this CPU has no bf16 instructions (avx512_bf16 or amx_bf16), where bf16 is emulated and slow: torch-fp32"
        want = Inference("torch", "fp32")
    if want.backend == "onnx" and not onnx_available():
        note = f"{want.label} needs the onnx and onnxruntime packages, which are not installed: torch-fp32"
        want = Inference("torch", "fp32")
    return _noted(Resolved(want, device, requested, note))


# Why ``auto`` runs a bi-encoder in torch-fp32 wherever it runs other models in bf16 (CUDA, and the rankers cleared
# for bf16 on a CPU with AVX512-BF16: docs/BENCHMARKS.md, "Round 53").
VECTORS_NOTE = ("auto: torch-fp32, the index's own precision: a reindex stores each comment's and question's vector in "
                "fp32 (indexing.encoder.TextEncoder), and this bi-encoder reads those where the index holds the text, "
                "so it encodes the others the same way")


def auto_bf16(requested: str, device: str, flags: dict[str, bool] | None = None) -> bool:
    """Whether ``auto`` (``requested``) runs a ranker cleared for bf16 (``RankerSpec.auto_bf16``) in torch-bf16
    here: on a CPU (``device``, already resolved) with AVX512-BF16 and without AMX. On an AMX CPU oneDNN is capped at
    its AVX512-BF16 kernels (indexing/__init__.py: AMX's sums move with the batch, and so would a comment's score),
    and there torch-bf16 answered the /rerank cascade 1.37x slower than torch-fp32 through a real server
    (docs/BENCHMARKS.md, "Round 36"), so ``auto`` keeps torch-fp32. CUDA runs bf16 for every ranker anyway."""
    if requested != "auto" or device != "cpu":
        return False
    flags = cpu_flags() if flags is None else flags
    return bool(flags.get("avx512_bf16")) and not flags.get("amx_bf16")


def _noted(r: Resolved) -> Resolved:
    if r.note:
        log.warning("inference %s on %s: %s", r.requested, r.device, r.note)
    return r


# --- ONNX Runtime ------------------------------------------------------------------------------------
def export_path(cache_dir: Path, digest: str, inference: Inference) -> Path:
    return cache_dir / "onnx" / f"minilm-{digest}-v{EXPORT_VERSION}-{inference.precision}.onnx"


def export(model, path: Path, inference: Inference) -> Path:
    """Write the ONNX graph of a MiniLM ranker (its kind decides inputs and output) to ``path``, quantised
    to int8 for ``onnx-int8``. Written under a temporary name and renamed, so a reader (another worker)
    never sees half a file."""
    import tempfile
    import warnings

    import torch
    path.parent.mkdir(parents=True, exist_ok=True)
    cross = model.config.kind == "cross-encoder"

    class Graph(torch.nn.Module):  # what is exported: the score (cross-encoder) or the vector (bi-encoder)
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, ids, mask, types=None):
            return self.m.pair_score(ids, mask, types) if cross else self.m.text_vector(ids, mask)

    wrapper = Graph(model).eval()
    ids = torch.tensor([[101, 2054, 2003, 102, 1037, 3231, 102]] * 2)
    mask = torch.ones_like(ids)
    types = torch.tensor([[0, 0, 0, 0, 1, 1, 1]] * 2)
    names = ["ids", "mask", "types"] if cross else ["ids", "mask"]
    axes = {n: {0: "batch", 1: "tokens"} for n in names} | {"out": {0: "batch"}}
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        fp32 = Path(tmp) / "fp32.onnx"
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(wrapper, (ids, mask, types) if cross else (ids, mask), str(fp32), input_names=names,
                              output_names=["out"], dynamic_axes=axes, opset_version=17, dynamo=False)
        out = fp32
        if inference.precision == "int8":
            import onnx
            from onnxruntime.quantization import QuantType, quantize_dynamic
            out = Path(tmp) / "int8.onnx"
            logging.disable(logging.WARNING)  # its advice to pre-process is for static (calibrated) quantisation
            try:
                quantize_dynamic(str(fp32), str(out), weight_type=QuantType.QInt8, per_channel=True,
                                 extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
            finally:
                logging.disable(logging.NOTSET)
        os.replace(out, path)
    return path


class OnnxRunner:
    """An ONNX Runtime session over an exported MiniLM ranker, with the torch model's calling convention:
    ``pair_score(ids, mask, types)`` for a cross-encoder, ``text_vector(ids, mask)`` for a bi-encoder,
    tensors in and out."""

    def __init__(self, path: Path, config, threads: int | None = None):
        import onnxruntime as ort
        import torch
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads or torch.get_num_threads()
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        self.session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        self.config = config
        self.path = path

    def _run(self, feeds: dict):
        import torch
        return torch.from_numpy(self.session.run(None, {k: v.cpu().numpy() for k, v in feeds.items()})[0])

    def pair_score(self, ids, mask, types):
        return self._run({"ids": ids, "mask": mask, "types": types})

    def text_vector(self, ids, mask):
        return self._run({"ids": ids, "mask": mask})

    def eval(self):
        return self


def onnx_runner(model, digest: str, inference: Inference, cache_dir: Path) -> OnnxRunner:
    """The cached export of ``model`` for ``inference`` (exported on first use), opened in ONNX Runtime."""
    path = export_path(cache_dir, digest, inference)
    if not path.exists():
        log.info("exporting %s to ONNX (%s) at %s", model.config.kind, inference.label, path)
        export(model, path, inference)
    return OnnxRunner(path, model.config)
