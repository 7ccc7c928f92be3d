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


def test_the_embedder_is_loaded_once_per_process_and_shared():
    """Issue 79.1: a run's pool, synthesis dedup and CoEvolve dedup share one embedding model (the quickstart's path
    built it twice); another device or batch size is another instance."""
    from evolvekit.config import EmbeddingConfig
    from evolvekit.llm.factory import build_embedder

    one = build_embedder(EmbeddingConfig())
    assert build_embedder(EmbeddingConfig()) is one
    assert build_embedder(EmbeddingConfig(batch_size=8)) is not one
