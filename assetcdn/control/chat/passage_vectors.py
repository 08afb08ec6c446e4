"""The documentation passages' vectors, made ahead of time and shipped beside this module
(`documentation_vectors.npz`, package data), so a start reads them instead of embedding some 250
passages, which costs 20-30 s of one core and made the first chat question time out.

Each vector is filed under a key of the model and the passage's text, so a file made before the
README, a page of docs/ or the API reference changed still serves every passage that did not change; the ones it
lacks are embedded at start, in the background, before the chat reports ready. `make setup`
brings the file up to date (`python -m assetcdn.control.chat.passage_vectors`, which embeds only
the passages it lacks), and a test checks that it matches the documentation as it is.

Vectors are kept as float16 (half the size in the repository and the wheel): a cosine moves by
less than 0.002, far below the 0.05 steps of the chat's confidence bands.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from assetcdn.control.search.encoder import SentenceEncoder

VECTORS_FILE = Path(__file__).with_name("documentation_vectors.npz")


def passage_key(model_id: str, text: str) -> str:
    return hashlib.sha256(f"{model_id}\n{text}".encode()).hexdigest()[:32]


def read_prebuilt(path: Path = VECTORS_FILE) -> dict[str, np.ndarray]:
    """Key -> vector (float32) from the shipped file; empty when it is missing or unreadable (the
    passages are then embedded at start)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            keys, vectors = data["keys"], data["vectors"]
    except (OSError, KeyError, ValueError):
        return {}
    if vectors.ndim != 2 or len(keys) != len(vectors):
        return {}
    return {str(k): v.astype(np.float32) for k, v in zip(keys, vectors, strict=True)}


@functools.lru_cache(maxsize=4)
def passage_matrix(encoder: SentenceEncoder, texts: tuple[str, ...], path: Path = VECTORS_FILE) -> tuple[np.ndarray, int]:
    """One row per text: the shipped vector where there is one, else embedded now. Returns the matrix
    and how many texts had to be embedded. Cached per process: every control app of a test process
    (and every chat of one app) shares the result, as it shares the model."""
    prebuilt = read_prebuilt(path)
    keys = [passage_key(encoder.model_id, t) for t in texts]
    missing = [i for i, k in enumerate(keys) if k not in prebuilt]
    matrix = np.empty((len(texts), encoder.dimensions), dtype=np.float32)
    for i, key in enumerate(keys):
        if key in prebuilt:
            matrix[i] = prebuilt[key]
    if missing:
        matrix[missing] = encoder.encode([texts[i] for i in missing])
    matrix.setflags(write=False)
    return matrix, len(missing)


def rebuild(model_id: str, load_encoder: Callable[[], SentenceEncoder], texts: Sequence[str],
            path: Path = VECTORS_FILE) -> tuple[int, int]:
    """Write the file for exactly these texts, embedding only what it lacks (the model is loaded only
    then); an up-to-date file is not rewritten. Returns (texts embedded, vectors dropped)."""
    prebuilt = read_prebuilt(path)
    text_of = {passage_key(model_id, t): t for t in texts}
    keys = list(text_of)
    missing = [k for k in keys if k not in prebuilt]
    dropped = len(set(prebuilt) - set(keys))
    if not missing and not dropped and list(prebuilt) == keys:
        return 0, 0
    fresh = dict(zip(missing, load_encoder().encode([text_of[k] for k in missing]), strict=True)) if missing else {}
    vectors = np.stack([fresh[k] if k in fresh else prebuilt[k] for k in keys]).astype(np.float16)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, keys=np.array(keys), vectors=vectors)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(buffer.getvalue())
    tmp.replace(path)
    return len(missing), dropped


def main() -> int:
    from assetcdn.control.chat.documentation import documentation_passages
    from assetcdn.control.search.encoder import MODEL_ID, ModelUnavailable, load_packaged_model

    texts = [p.embedding_text() for p in documentation_passages()]
    try:
        embedded, dropped = rebuild(MODEL_ID, lambda: load_packaged_model().encoder, texts)
    except ModelUnavailable as exc:
        sys.stderr.write(f"documentation vectors not rebuilt: {exc}\n")
        return 0  # the chat then embeds at start, or answers by word overlap without the model
    if embedded or dropped:
        sys.stdout.write(f"{VECTORS_FILE.name}: {len(texts)} passages, {embedded} embedded, {dropped} dropped\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
