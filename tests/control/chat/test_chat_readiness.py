"""The chat is ready soon after start: the documentation vectors ship with the package (made ahead by
`make setup`), match the README, docs/ and the API reference as they are, and control's health says when the chat
answers without warming up."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
from aiohttp.test_utils import TestClient

from assetcdn.control.chat.documentation import documentation_passages
from assetcdn.control.chat.generation import extractive_answer, extractive_lead, sentence_vectors
from assetcdn.control.chat.passage_vectors import (
    VECTORS_FILE,
    passage_key,
    passage_matrix,
    read_prebuilt,
    rebuild,
)
from assetcdn.control.chat.retrieval import Retrieved, ScoredPassage
from assetcdn.control.search.calibration import calibrate
from assetcdn.control.search.encoder import MODEL_ID, SentenceEncoder, load_packaged_model
from tests.support.chat import answer_text, parse_sse

STALE = ("the shipped documentation vectors do not match the documentation: run `make setup` "
         "(python -m assetcdn.control.chat.passage_vectors) and commit " + VECTORS_FILE.name)


@pytest.fixture(scope="module")
def encoder() -> SentenceEncoder:
    return load_packaged_model().encoder


def test_the_shipped_vectors_cover_every_passage_of_the_documentation_as_it_is() -> None:
    prebuilt = read_prebuilt()
    texts = [p.embedding_text() for p in documentation_passages()]
    assert len(texts) > 100
    missing = [t[:60] for t in texts if passage_key(MODEL_ID, t) not in prebuilt]
    assert not missing, f"{STALE}; missing: {missing[:5]}"
    assert len(prebuilt) == len({passage_key(MODEL_ID, t) for t in texts}), f"{STALE}; it has passages no longer there"


def test_the_shipped_vectors_are_the_models_own(encoder: SentenceEncoder) -> None:
    prebuilt = read_prebuilt()
    texts = [p.embedding_text() for p in documentation_passages()]
    sample = [texts[0], texts[len(texts) // 2], texts[-1]]
    fresh = encoder.encode(sample)
    for text, vector in zip(sample, fresh, strict=True):
        assert float(prebuilt[passage_key(MODEL_ID, text)] @ vector) > 0.999, text[:60]


def test_a_start_embeds_nothing_when_the_file_is_current_and_only_what_changed_otherwise(
        encoder: SentenceEncoder, tmp_path: Path) -> None:
    texts = tuple(p.embedding_text() for p in documentation_passages())
    _, embedded = passage_matrix(encoder, texts)
    assert embedded == 0
    # A file made before two passages changed (a few passages, to keep the test short): the others
    # still come from it.
    older = tmp_path / "vectors.npz"
    kept = texts[:6]
    changed = (*kept, "Zones: a zone is a folder of assets.", "Purges: a purge drops cached copies.")
    assert rebuild(MODEL_ID, lambda: encoder, (*kept, texts[6], texts[7]), older) == (8, 0)
    matrix, embedded = passage_matrix(encoder, changed, older)
    assert embedded == 2 and matrix.shape == (len(changed), encoder.dimensions)
    assert rebuild(MODEL_ID, lambda: encoder, changed, older) == (2, 2)
    assert rebuild(MODEL_ID, lambda: encoder, changed, older) == (0, 0)   # current: left as it is


def test_the_extractive_answer_begins_with_the_lead_sent_before_it_is_scored(encoder: SentenceEncoder) -> None:
    passages = documentation_passages()
    matrix, _ = passage_matrix(encoder, tuple(p.embedding_text() for p in passages))
    for question in ("How do I purge a file from the cache?", "What is a zone?", "How are videos streamed?",
                     "Which image formats can the transform produce?", "zzzz qqqq"):
        scores = calibrate(matrix @ encoder.encode_one(question))
        top = np.argsort(-scores)[:3]
        retrieved = Retrieved(tuple(ScoredPassage(passages[i], float(scores[i])) for i in top), ())
        text, _ = extractive_answer(question, retrieved, encoder)
        lead = extractive_lead(retrieved)
        assert text.startswith(lead), (question, lead, text)


def test_a_documentation_sentence_is_encoded_once_per_process(encoder: SentenceEncoder) -> None:
    class Counting:
        model_id = f"{encoder.model_id} (counted)"   # its own keys: nothing a previous test cached
        encoded: list[str] = []

        def encode(self, texts: list[str]) -> np.ndarray:
            self.encoded += texts
            return encoder.encode(texts)

    counting = Counting()
    sentences = ["A zone is a folder of assets.", "A purge drops cached copies.", "A zone is a folder of assets."]
    first = sentence_vectors(counting, sentences)  # type: ignore[arg-type]
    assert counting.encoded == sentences[:2]        # the repeated one once
    assert np.allclose(first, encoder.encode(sentences), atol=1e-5)
    again = sentence_vectors(counting, ["A purge drops cached copies.", "Video is streamed as HLS."])  # type: ignore[arg-type]
    assert counting.encoded == [*sentences[:2], "Video is streamed as HLS."]
    assert np.array_equal(again[0], first[1])


async def test_health_says_when_the_chat_is_ready_and_a_question_then_answers(control: TestClient) -> None:
    resp = await control.get("/api/health")
    body = await resp.json()
    assert resp.status == 200 and body["status"] == "ok"   # warming up never degrades the service
    assert body["chat"] in ("loading", "ready")
    for _ in range(600):   # the model loads on a worker thread; its vectors come from the package
        if body["chat"] == "ready":
            break
        await asyncio.sleep(0.1)
        body = await (await control.get("/api/health")).json()
    assert body["chat"] == "ready"
    resp = await control.post("/api/chat", json={"message": "How do I purge a file from the cache?"})
    frames = parse_sse(await resp.text())
    assert frames[0][0] == "metadata" and frames[-1][0] == "done"
    assert answer_text(frames).startswith('From "')
