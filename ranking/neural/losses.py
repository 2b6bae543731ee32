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
