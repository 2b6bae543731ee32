"""The BERT encoder of all-MiniLM-L6-v2 and its WordPiece tokenizer, in plain torch and the ``tokenizers`` library.

Every MiniLM model of the project (the dense index's encoder, the cross- and bi-encoders, ranking/neural/minilm.py) is
this network. It computes what transformers' ``BertModel`` (without its pooler, with the SDPA attention transformers
picks by default) computes, op for op, so its outputs are the same to the bit (tests/test_encoder.py checks it against
transformers, which stays the reference, as sentence-transformers does for the vectors). What it saves is the import:
transformers takes about 7 s of a 2-core machine's CPU to import, on every start of a server, a worker or a CLI
command that loads a model (docs/BENCHMARKS.md, "Round 34"); torch, which this needs, about 3 s.

The parameter names are transformers' (``embeddings.word_embeddings.weight``, ``encoder.layer.0.attention.self.query
.weight``, ...), so the package's weights and every checkpoint load as they did.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path

import torch
from torch import nn


@dataclass(frozen=True)
class BertConfig:
    """What the network's shape and numerics need of a BERT ``config.json``."""
    vocab_size: int = 30522
    hidden_size: int = 384
    num_hidden_layers: int = 6
    num_attention_heads: int = 12
    intermediate_size: int = 1536
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0

    @classmethod
    def from_file(cls, path: Path) -> "BertConfig":
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
        if raw.get("model_type", "bert") != "bert" or raw.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"{path}: not a BERT with absolute positions ({raw.get('model_type')})")
        if raw.get("is_decoder") or raw.get("hidden_act", "gelu") != "gelu":
            raise ValueError(f"{path}: only a BERT encoder with the exact GELU is supported")
        names = {f.name for f in fields(cls)}
        config = cls(**{k: v for k, v in raw.items() if k in names})
        if config.hidden_size % config.num_attention_heads:
            raise ValueError(f"{path}: hidden size {config.hidden_size} is not a multiple of "
                             f"{config.num_attention_heads} heads")
        return config


class BertEmbeddings(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.register_buffer("position_ids", torch.arange(config.max_position_embeddings).expand((1, -1)),
                             persistent=False)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None) -> torch.Tensor:
        position_ids = self.position_ids[:, : input_ids.shape[1]]
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        x = x + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(x))


class BertSelfAttention(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.head_size = config.hidden_size // config.num_attention_heads
        self.scaling = self.head_size ** -0.5
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        shape = (*x.shape[:-1], -1, self.head_size)
        q, k, v = (lin(x).view(*shape).transpose(1, 2) for lin in (self.query, self.key, self.value))
        out = nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.dropout.p if self.training else 0.0, scale=self.scaling,
            is_causal=False)
        out = out.reshape(out.shape[0], -1, q.shape[2], v.shape[-1]).transpose(1, 2).contiguous()
        return out.reshape(*x.shape[:-1], -1).contiguous()


class BertResidual(nn.Module):
    """A dense layer, dropout, and the layer norm of the sum with the block's input (BERT's ``SelfOutput`` and
    ``Output``)."""

    def __init__(self, config: BertConfig, width: int):
        super().__init__()
        self.dense = nn.Linear(width, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class BertAttention(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertResidual(config, config.hidden_size)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        return self.output(self.self(x, mask), x)


class BertIntermediate(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.gelu(self.dense(x))


class BertLayer(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertResidual(config, config.intermediate_size)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        a = self.attention(x, mask)
        return self.output(self.intermediate(a), a)


class BertEncoder(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.layer = nn.ModuleList([BertLayer(config) for _ in range(config.num_hidden_layers)])


class BertModel(nn.Module):
    """BERT without its pooler: token ids (and an attention mask, token types) in, the last layer's hidden states out.
    Built, it holds torch's default initial weights; every use loads real ones over them (``from_pretrained``, or a
    checkpoint's by ranking/neural/minilm.py's ``load``)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)

    @classmethod
    def from_pretrained(cls, folder: str | Path) -> "BertModel":
        """The model of a folder holding ``config.json`` and ``model.safetensors`` (its pooler's weights, if any,
        are left out)."""
        from safetensors.torch import load_file
        folder = Path(folder)
        model = cls(BertConfig.from_file(folder / "config.json"))
        state = {k.removeprefix("bert."): v for k, v in load_file(str(folder / "model.safetensors")).items()
                 if not k.removeprefix("bert.").startswith("pooler.") and not k.endswith("position_ids")}
        missing, unexpected = model.load_state_dict(state, strict=False)
        if missing or unexpected:
            raise ValueError(f"{folder}: weights do not fit a BERT (missing {missing}, unexpected {unexpected})")
        return model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        x = self.embeddings(input_ids, token_type_ids)
        mask = attention_mask_4d(attention_mask, x.shape[1])
        for layer in self.encoder.layer:
            x = layer(x, mask)
        return x


def attention_mask_4d(mask: torch.Tensor | None, length: int) -> torch.Tensor | None:
    """A (batch, length) 0/1 mask as SDPA takes it: (batch, 1, length, length) booleans, each query seeing the
    unmasked keys; None where nothing is masked (as transformers does, which lets SDPA pick its fastest kernel), except
    in a traced graph (an ONNX export), which must hold the mask for the batches it is run on."""
    if mask is None:
        return None
    if not (torch.jit.is_tracing() or torch.onnx.is_in_onnx_export()) and bool(mask.all()):
        return None  # an export keeps the mask: the graph is traced once and then takes padded batches
    keys = mask.bool()[:, None, None, :]
    # laid out in memory, as transformers makes it: SDPA on a CPU ran 3% slower over the expanded view (stride 0)
    return keys.expand(mask.shape[0], 1, length, mask.shape[1]).contiguous()


class WordPieceTokenizer:
    """The package's WordPiece tokenizer (its ``tokenizer.json``) through the ``tokenizers`` library, as transformers'
    fast tokenizer calls it: the same ids, without the import."""

    def __init__(self, folder: str | Path):
        from tokenizers import Tokenizer
        self._tok = Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))
        self._tok.no_padding()  # the file's own padding and truncation (128) are not what a caller asks for
        self._tok.no_truncation()
        special = json.loads((Path(folder) / "special_tokens_map.json").read_text(encoding="utf-8"))

        def token_id(name: str) -> int:
            value = special[name]
            value = value["content"] if isinstance(value, dict) else value
            i = self._tok.token_to_id(value)
            if i is None:
                raise ValueError(f"{folder}: {name} {value!r} is not in the vocabulary")
            return i
        self.cls_token_id, self.sep_token_id = token_id("cls_token"), token_id("sep_token")
        self.unk_token_id = token_id("unk_token")

    def ids(self, texts: list[str], max_length: int, special_tokens: bool = False) -> list[list[int]]:
        """Each text's ids, at most ``max_length`` of them; with ``special_tokens``, [CLS] first and [SEP] last among
        them (a text cut short keeps its [SEP], as the tokenizer's own truncation does). The tokenizer is not told to
        truncate, which would change it for every thread that shares it: the ids are cut here."""
        if not texts:
            return []
        out = [e.ids for e in self._tok.encode_batch(list(texts), add_special_tokens=special_tokens)]
        if special_tokens:
            return [x if len(x) <= max_length else x[: max_length - 1] + x[-1:] for x in out]
        return [x[:max_length] for x in out]

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
        return [self._tok.id_to_token(i) for i in ids]

