"""The BiLSTM as a ranker: cos(o_q, o_a) for each candidate, with per-token attention kept."""
from __future__ import annotations

from dataclasses import dataclass
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

    @classmethod
    def from_checkpoint(cls, folder: Path, device: str = "auto") -> "BiLSTMRanker":
        from indexing.encoder import resolve_device

        from .checkpoint import load
        dev = resolve_device(device)
        model, _ = load(folder, dev)
        return cls(model, dev)

    @torch.no_grad()
    def _run(self, queries: list[Query], with_attention: bool):
        self.model.eval()
        cfg = self.model.config
        q_ids = encode_texts([q.text for q in queries], cfg.max_question_len)
        pairs = [qi for qi, q in enumerate(queries) for _ in q.candidates]
        a_ids = encode_texts([c.text for q in queries for c in q.candidates], cfg.max_answer_len) if pairs else []
        scores: list[float] = []
        attention: list[list[tuple[str, float]]] = []
        for s in range(0, len(pairs), self.batch_size):
            chunk = range(s, min(s + self.batch_size, len(pairs)))
            qb, ql = pad([q_ids[pairs[i]] for i in chunk], self.device)
            ab, al = pad([a_ids[i] for i in chunk], self.device)
            cos, att = self.model(qb, ql, ab, al)
            scores += cos.float().cpu().tolist()
            if with_attention:
                att = att.float().cpu()
                for j, i in enumerate(chunk):
                    toks = id_to_token(a_ids[i])
                    attention.append(list(zip(toks, att[j, : len(toks)].tolist())))
        return _split(scores, queries), _split(attention, queries) if with_attention else None

    def score_with_attention(self, queries: list[Query]) -> tuple[list[list[float]], list[list[list[tuple[str, float]]]]]:
        """Scores, and each candidate's (token, attention weight) pairs."""
        return self._run(queries, with_attention=True)

    def score(self, queries: list[Query]) -> list[list[float]]:
        return self._run(queries, with_attention=False)[0]


def _split(flat: list, queries: list[Query]) -> list[list]:
    out, at = [], 0
    for q in queries:
        out.append(flat[at: at + len(q.candidates)])
        at += len(q.candidates)
    return out
