"""The index encoder (indexing/encoder.py) against sentence-transformers, its reference: same vectors."""
from __future__ import annotations

import numpy as np
import pytest

from indexing.encoder import encode, load_encoder, load_reference


@pytest.fixture(scope="module")
def texts():
    from app.settings import Settings
    from indexing.catalog import split_file
    from indexing.loaders import load
    comments = [a.text for t in load(Settings().semeval_dir / split_file("dev")).threads[:6] for a in t.answers]
    long = " ".join(comments) * 3  # far past the 256 word pieces the model reads
    return comments + [long, "", "?", "Où est le souk? مرحبا 你好 🙂"]


def test_the_encoder_gives_sentence_transformers_vectors(texts):
    ref = load_reference("cpu").encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
    got = encode(texts, device="cpu")
    assert got.shape == ref.shape == (len(texts), 384) and got.dtype == np.float32
    assert float(np.abs(got - ref).max()) < 1e-5
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_batching_and_order_do_not_change_a_vector(texts):
    enc = load_encoder("cpu")
    one = enc.encode(texts, batch_size=1)
    many = enc.encode(texts[::-1], batch_size=64)[::-1]
    assert float(np.abs(one - many).max()) < 1e-5
    assert encode([], device="cpu").shape == (0, 384)


def test_the_project_bert_is_transformers_bert_to_the_bit(texts):
    """indexing/bert.py against transformers' BertModel and fast tokenizer, its reference: the same word-piece ids
    (with and without [CLS]/[SEP], cut short or not, Arabic, emoji and empty texts among them) and the same hidden
    states to the bit, for a padded batch and a batch without padding, with token types and without, in fp32 and
    under bf16 autocast (the MiniLM rankers' two torch variants); a fine-tuned checkpoint (the cross-encoder's
    weights over the package's) scores as transformers' network with them."""
    import torch
    from transformers import AutoTokenizer
    from transformers import BertModel as Reference

    from indexing.bert import BertModel, WordPieceTokenizer
    from indexing.encoder import model_path
    root = model_path()
    ref_tok, tok = AutoTokenizer.from_pretrained(root), WordPieceTokenizer(root)
    for special, max_length in ((False, 512), (True, 128), (True, 256), (False, 4)):
        assert tok.ids(texts, max_length, special) == ref_tok(
            texts, add_special_tokens=special, truncation=True, max_length=max_length)["input_ids"], (special, max_length)
    assert tok.cls_token_id == ref_tok.cls_token_id and tok.sep_token_id == ref_tok.sep_token_id
    assert tok.convert_ids_to_tokens([101, 7592, 102]) == ref_tok.convert_ids_to_tokens([101, 7592, 102])

    ref, ours = Reference.from_pretrained(root, add_pooling_layer=False).eval(), BertModel.from_pretrained(root).eval()
    assert set(ref.state_dict()) == set(ours.state_dict())
    ids = tok.ids(texts[:5] + texts[-4:], 64, special_tokens=True)
    n = max(map(len, ids))
    batch, mask, types = (torch.zeros((len(ids), n), dtype=torch.long) for _ in range(3))
    for i, x in enumerate(ids):
        batch[i, : len(x)], mask[i, : len(x)], types[i, 3: len(x)] = torch.tensor(x), 1, 1
    assert not mask.all()
    full = [i for i, x in enumerate(ids) if len(x) == n]
    cases = [(batch, mask, None), (batch, mask, types), (batch[full], mask[full], types[full])]
    with torch.no_grad():
        for b, m, t in cases:
            for bf16 in (False, True):
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                    want = ref(input_ids=b, attention_mask=m, token_type_ids=t).last_hidden_state
                    got = ours(b, m, t)
                assert got.dtype == want.dtype and torch.equal(got, want), (bf16, t is None, len(b))

    from indexing.config import PROJECT_ROOT
    from ranking.neural.minilm import load
    tuned = load(PROJECT_ROOT / "models" / "cross-encoder")[0].bert.eval()  # the checkpoint as the rankers load it
    ref.load_state_dict(tuned.state_dict())
    with torch.no_grad():
        assert torch.equal(tuned(batch, mask, types), ref(input_ids=batch, attention_mask=mask,
                                                          token_type_ids=types).last_hidden_state)


def test_loading_the_models_does_not_import_transformers():
    """A server, a worker or a CLI command that loads the MiniLM rankers and the index encoder never imports
    transformers (about 7 s of CPU on a 2-core machine): the network and the tokenizer are indexing/bert.py's."""
    import subprocess
    import sys
    from pathlib import Path
    code = ("import sys; from pathlib import Path\n"
            "from ranking.neural.ranker import MiniLMRanker\n"
            "from indexing.encoder import encode\n"
            "r = MiniLMRanker.from_checkpoint(Path('models/cross-encoder'), device='cpu', inference='torch-fp32')\n"
            "assert len(r.score_pairs([('visa', 'renew it online')])) == 1\n"
            "assert encode(['visa'], device='cpu').shape == (1, 384)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('transformers', 'sentence_transformers')))\n")
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout


def test_the_tokenizer_gives_transformers_ids_on_every_corpus_text():
    """WordPieceTokenizer against transformers' fast tokenizer on every subject, body, question (subject and body)
    and comment of the 2016 corpus files: the same ids as the MiniLM rankers ask for them (no special tokens, at most
    512) and as the index encoder does ([CLS] and [SEP], at most 256)."""
    from transformers import AutoTokenizer

    from app.settings import Settings
    from indexing.bert import WordPieceTokenizer
    from indexing.catalog import CORPUS_FILES
    from indexing.encoder import model_path
    from indexing.loaders import load
    texts = []
    for f in CORPUS_FILES:
        for t in load(Settings().semeval_dir / f, strict=False).threads:
            texts += [t.subject, t.body, f"{t.subject} {t.body}", *(a.text for a in t.answers)]
    assert len(texts) > 30_000
    ref, tok = AutoTokenizer.from_pretrained(model_path()), WordPieceTokenizer(model_path())
    for special, max_length in ((False, 512), (True, 256)):
        want = ref(texts, add_special_tokens=special, truncation=True, max_length=max_length)["input_ids"]
        got = tok.ids(texts, max_length, special)
        assert sum(a != b for a, b in zip(got, want)) == 0 and len(got) == len(want), (special, max_length)
