import pytest

from evolvekit.llm.embeddings import SentenceTransformerEmbedder, cosine_matrix

pytestmark = pytest.mark.slow


def test_minilm_offline_similarity():
    emb = SentenceTransformerEmbedder()
    v = emb.embed(["A cat sits on the mat.", "A kitten is resting on a rug.", "Quarterly tax filing deadlines."])
    assert v.shape == (3, 384)
    sims = cosine_matrix(v, v)
    assert sims[0, 1] > 0.5 > sims[0, 2]
    assert emb.embed([]).shape == (0, 384)
