"""The packaged MiniLM run in numpy gives the published model's similarities (real weights, no mocks)."""

from __future__ import annotations

import numpy as np
import pytest

from assetcdn.control.search.encoder import DIMENSIONS, SentenceEncoder, load_packaged_model

# Published for sentence-transformers/all-MiniLM-L6-v2 (the sentence-transformers quick start):
# model.similarity over these three sentences gives 0.6660, 0.1046 and 0.1411.
PUBLISHED = [("The weather is lovely today.", "It's so sunny outside!", 0.6660),
             ("The weather is lovely today.", "He drove to the stadium.", 0.1046),
             ("It's so sunny outside!", "He drove to the stadium.", 0.1411)]


@pytest.fixture(scope="module")
def encoder() -> SentenceEncoder:
    return load_packaged_model().encoder  # once per test process (the loader caches it)


def test_published_similarities_are_reproduced(encoder: SentenceEncoder) -> None:
    for a, b, expected in PUBLISHED:
        va, vb = encoder.encode([a, b])
        assert float(va @ vb) == pytest.approx(expected, abs=5e-4), (a, b)


def test_vectors_are_unit_length_and_384_wide(encoder: SentenceEncoder) -> None:
    vectors = encoder.encode(["logo", "a much longer sentence about a red sports car parked on a street"])
    assert vectors.shape == (2, DIMENSIONS) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_paraphrases_score_far_above_unrelated_pairs(encoder: SentenceEncoder) -> None:
    pairs = [("A man is eating food.", "A man is eating a piece of bread."),
             ("How do I delete a file?", "What is the way to remove a file?"),
             ("red sports car", "a fast red Ferrari")]
    unrelated = [("A man is eating food.", "The stock market fell sharply today."),
                 ("How do I delete a file?", "A cheetah is running behind its prey."),
                 ("red sports car", "a bowl of ramen noodles")]
    paraphrase = [float(a @ b) for a, b in (encoder.encode(list(p)) for p in pairs)]
    other = [float(a @ b) for a, b in (encoder.encode(list(p)) for p in unrelated)]
    assert min(paraphrase) > 0.5 > 0.2 > max(other)


def test_batched_and_single_encodings_agree(encoder: SentenceEncoder) -> None:
    # Padding in a batch must not change a short text's vector (the attention mask works).
    texts = ["ferrari", "a considerably longer text that forces padding on the short one in the batch"]
    batched = encoder.encode(texts)
    single = np.stack([encoder.encode_one(t) for t in texts])
    assert np.allclose(batched, single, atol=1e-5)


def test_long_text_is_truncated_not_refused(encoder: SentenceEncoder) -> None:
    vector = encoder.encode_one("word " * 2000)
    assert np.isfinite(vector).all() and abs(float(np.linalg.norm(vector)) - 1.0) < 1e-5
