"""The BiLSTM as a ranker: cos(o_q, o_a) for each candidate, with per-token attention kept."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..candidates import Query
from .bilstm import BiLSTMAttention, pad
from .vocab import encode_texts, id_to_token


@dataclass
class BiLSTMRanker:
    model: BiLSTMAttention
    device: str = "cpu"
    batch_size: int = 256
    name: str = "bilstm"
    last_attention: list = field(default_factory=list, repr=False)

    @classmethod
    def from_checkpoint(cls, folder: Path, device: str = "auto") -> "BiLSTMRanker":
        from indexing.encoder import resolve_device

        from .checkpoint import load
        dev = resolve_device(device)
        model, _ = load(folder, dev)
        return cls(model, dev)

    @torch.no_grad()
    def score_with_attention(self, queries: list[Query]) -> tuple[list[list[float]], list[list[list[tuple[str, float]]]]]:
        self.model.eval()
        cfg = self.model.config
        q_ids = encode_texts([q.text for q in queries], cfg.max_question_len)
        pairs = [(qi, c.text) for qi, q in enumerate(queries) for c in q.candidates]
        a_ids = encode_texts([t for _, t in pairs], cfg.max_answer_len) if pairs else []
        scores: list[float] = []
        attention: list[list[tuple[str, float]]] = []
        for s in range(0, len(pairs), self.batch_size):
            chunk = range(s, min(s + self.batch_size, len(pairs)))
            qb, ql = pad([q_ids[pairs[i][0]] for i in chunk], self.device)
            ab, al = pad([a_ids[i] for i in chunk], self.device)
            cos, att = self.model(qb, ql, ab, al)
            scores += cos.float().cpu().tolist()
            att = att.float().cpu()
            for j, i in enumerate(chunk):
                toks = id_to_token(a_ids[i])
                attention.append(list(zip(toks, att[j, : len(toks)].tolist())))
        out_s, out_a, at = [], [], 0
        for q in queries:
            n = len(q.candidates)
            out_s.append(scores[at: at + n])
            out_a.append(attention[at: at + n])
            at += n
        return out_s, out_a

    def score(self, queries: list[Query]) -> list[list[float]]:
        scores, self.last_attention = self.score_with_attention(queries)
        return scores
