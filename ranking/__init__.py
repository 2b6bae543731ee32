"""ranking: turns a question into a ranked list, using the indexes and the models."""
import indexing  # noqa: F401  (first: it caps oneDNN's kernels before any product, see indexing/__init__.py)
