"""indexing: turns thread files into a store and the store into index generations."""
import os

# bf16 scores that do not move with their batch mates (docs/BENCHMARKS.md, "Round 23" and "Round 36"): on a CPU with
# AMX, oneDNN picks its AMX kernels by the shape of each product, and they sum in another order as the batch grows, so
# a comment would score one way alone and another beside other threads, even padded to the same width. oneDNN is
# capped at its AVX512-BF16 kernels (those rounds 22-23 measured), unless the operator sets ONEDNN_MAX_CPU_ISA
# (e.g. ALL: AMX, scores that move with the batch). oneDNN reads it once, at its first product: set here, on import,
# before any (every entry point imports this package; ranking/__init__.py imports it first).
os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16")
