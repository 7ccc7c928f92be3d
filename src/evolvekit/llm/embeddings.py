"""Sentence embeddings behind a small protocol; the default is the packaged all-MiniLM-L6-v2 (offline)."""

from __future__ import annotations

import logging
from typing import Protocol, Sequence

import numpy as np

from evolvekit.llm.embedded import resolve_model_path

log = logging.getLogger(__name__)


class Embedder(Protocol):
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Return an (n, dim) float32 array of L2-normalised vectors."""
        ...


class SentenceTransformerEmbedder:
    def __init__(self, model: str = "embedded:all-minilm-l6-v2", device: str = "cpu", batch_size: int = 64) -> None:
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(resolve_model_path(model), device=device)
        self.batch_size = batch_size
        dim = getattr(self.model, "get_embedding_dimension", self.model.get_sentence_embedding_dimension)()
        if dim is None:
            raise ValueError(f"{model}: the embedding model does not report its dimension")
        self.dim = int(dim)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vecs = self.model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return vecs.astype(np.float32)


def cosine_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarities of normalised row vectors."""
    return a @ b.T
