"""BiLSTM with attention for answer selection (Tan, dos Santos, Xiang and Zhou 2016, "Improved
Representation Learning for Question Answer Matching").

One BiLSTM encodes question and answer; o_q is the mean of the question's hidden states; each answer
state is weighted by attention on o_q: m(t) = W_am h_a(t) + W_qm o_q, s(t) ~ exp(w_ms^T tanh(m(t))),
h~_a(t) = h_a(t) s(t); o_a is the mean of the weighted states; the score is cos(o_q, o_a).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


@dataclass
class BiLSTMConfig:
    vocab_size: int = 30522
    embedding_dim: int = 384
    hidden: int = 128  # per direction
    dropout: float = 0.5
    max_question_len: int = 64
    max_answer_len: int = 96

    def to_dict(self) -> dict:
        return asdict(self)


class BiLSTMAttention(nn.Module):
    def __init__(self, config: BiLSTMConfig, embeddings: torch.Tensor):
        super().__init__()
        self.config = config
        self.embedding = nn.Embedding.from_pretrained(embeddings, freeze=True, padding_idx=0)
        self.lstm = nn.LSTM(config.embedding_dim, config.hidden, batch_first=True, bidirectional=True)
        h = 2 * config.hidden
        self.W_am = nn.Linear(h, h, bias=False)
        self.W_qm = nn.Linear(h, h, bias=False)
        self.w_ms = nn.Linear(h, 1, bias=False)
        self.dropout = nn.Dropout(config.dropout)

    def _states(self, ids: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.dropout(self.embedding(ids))
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        h, _ = pad_packed_sequence(out, batch_first=True, total_length=ids.size(1))
        mask = torch.arange(ids.size(1), device=ids.device)[None, :] < lengths[:, None]
        return self.dropout(h), mask

    def question_vector(self, ids, lengths) -> torch.Tensor:
        h, mask = self._states(ids, lengths)
        m = mask.unsqueeze(-1).to(h.dtype)
        return (h * m).sum(1) / m.sum(1)

    def answer_vector(self, ids, lengths, o_q) -> tuple[torch.Tensor, torch.Tensor]:
        h, mask = self._states(ids, lengths)
        m = torch.tanh(self.W_am(h) + self.W_qm(o_q).unsqueeze(1))
        logits = self.w_ms(m).squeeze(-1).masked_fill(~mask, float("-inf"))
        s = torch.softmax(logits, dim=1)
        weighted = h * s.unsqueeze(-1)
        o_a = weighted.sum(1) / mask.sum(1, keepdim=True).to(h.dtype)
        return o_a, s

    def forward(self, q_ids, q_len, a_ids, a_len) -> tuple[torch.Tensor, torch.Tensor]:
        """cos(o_q, o_a) per pair, and the attention weights over the answer tokens."""
        o_q = self.question_vector(q_ids, q_len)
        o_a, s = self.answer_vector(a_ids, a_len, o_q)
        return F.cosine_similarity(o_q, o_a, dim=-1), s

    def own_state_dict(self) -> dict[str, torch.Tensor]:
        """The ranker's own weights: everything but the packaged embedding matrix."""
        return {k: v for k, v in self.state_dict().items() if not k.startswith("embedding.")}


def pad(batch: list[list[int]], device) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.tensor([len(x) for x in batch], dtype=torch.long)
    out = torch.zeros(len(batch), int(lengths.max()), dtype=torch.long)
    for i, x in enumerate(batch):
        out[i, : len(x)] = torch.tensor(x, dtype=torch.long)
    return out.to(device), lengths.to(device)
