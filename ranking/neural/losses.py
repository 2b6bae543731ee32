"""Losses, one small module each."""
from __future__ import annotations

import torch
from torch import nn


class CosineHingeLoss(nn.Module):
    """max(0, M - cos(q, a+) + cos(q, a-)) (Tan, dos Santos, Xiang and Zhou 2016; Feng et al. 2015)."""

    def __init__(self, margin: float = 0.2):
        super().__init__()
        self.margin = margin

    def forward(self, cos_pos: torch.Tensor, cos_neg: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.margin - cos_pos + cos_neg).mean()


class PairwiseHingeLoss(nn.Module):
    """max(0, M - s(q, a+) + s(q, a-)) on raw cross-encoder scores: the cosine hinge loss for a model
    that scores the pair directly instead of comparing two vectors."""

    def __init__(self, margin: float = 1.0):
        super().__init__()
        self.margin = margin

    def forward(self, pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.margin - pos + neg).mean()


class PairBCELoss(nn.Module):
    """The pointwise comparison: binary cross-entropy with the good answer labelled 1, the bad one 0."""

    def forward(self, pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
        logits = torch.cat([pos, neg])
        target = torch.cat([torch.ones_like(pos), torch.zeros_like(neg)])
        return nn.functional.binary_cross_entropy_with_logits(logits, target)
