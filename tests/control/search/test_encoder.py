"""The packaged MiniLM run in numpy gives the published model's similarities (real weights, no mocks)."""

from __future__ import annotations

import logging
import zipfile
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save as save_safetensors

from assetcdn.control.search.encoder import (
    DIMENSIONS,
    WEIGHTS,
    SentenceEncoder,
    load_packaged_model,
    model_cache_dir,
    read_weights,
    safetensors_arrays,
)

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


class CountingZip(zipfile.ZipFile):
    """A zip laid out as the model's package (its weights deflated), counting what is inflated from it."""

    inflated: list[str]

    def read(self, name: str | zipfile.ZipInfo, pwd: bytes | None = None) -> bytes:
        self.inflated.append(name if isinstance(name, str) else name.filename)
        return super().read(name, pwd)


WEIGHT_BYTES = bytes(range(256)) * 4096   # 1 MB: the cache's logic without inflating the real 91 MB each time


@pytest.fixture
def packaged(tmp_path: Path) -> CountingZip:
    path = tmp_path / "model.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(WEIGHTS, WEIGHT_BYTES)
        archive.writestr("config.json", "{}")
    archive = CountingZip(path)
    archive.inflated = []
    return archive


def test_the_weights_are_inflated_once_then_read_back_from_the_cache(packaged: CountingZip, tmp_path: Path) -> None:
    assert read_weights(packaged, tmp_path / "cache") == WEIGHT_BYTES
    assert packaged.inflated == [WEIGHTS]
    assert (tmp_path / "cache").stat().st_mode & 0o777 == 0o700   # the owner's only
    [kept] = (tmp_path / "cache").iterdir()  # no temporary file is left beside it
    assert kept.suffix == ".safetensors" and kept.read_bytes() == WEIGHT_BYTES
    assert read_weights(packaged, tmp_path / "cache") == WEIGHT_BYTES
    assert packaged.inflated == [WEIGHTS]   # the second load inflated nothing


@pytest.mark.parametrize("damage", ["truncated", "one byte changed"])
def test_a_damaged_cached_copy_is_replaced_never_used(packaged: CountingZip, tmp_path: Path, damage: str,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    read_weights(packaged, tmp_path / "cache")
    [kept] = (tmp_path / "cache").iterdir()
    good = kept.read_bytes()
    kept.write_bytes(good[:1000] if damage == "truncated" else good[:-1] + bytes([good[-1] ^ 1]))
    with caplog.at_level(logging.WARNING):
        assert read_weights(packaged, tmp_path / "cache") == WEIGHT_BYTES
    assert "does not match the packaged model" in caplog.text
    assert packaged.inflated == [WEIGHTS, WEIGHTS] and kept.read_bytes() == WEIGHT_BYTES


def test_a_cache_that_cannot_be_written_costs_only_the_speed(packaged: CountingZip, tmp_path: Path,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    with caplog.at_level(logging.WARNING):
        assert read_weights(packaged, blocked / "cache") == WEIGHT_BYTES
    assert "cannot keep the inflated model" in caplog.text and blocked.read_text() == "not a directory"


def test_the_cache_is_the_setting_else_the_users_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/ops")
    assert model_cache_dir("/srv/models") == Path("/srv/models")
    assert model_cache_dir("~/models") == Path("/home/ops/models")
    assert model_cache_dir(environ={"XDG_CACHE_HOME": "/var/cache/ops"}) == Path("/var/cache/ops/assetcdn")
    # A relative XDG_CACHE_HOME is ignored, as the XDG spec asks.
    assert model_cache_dir(environ={"XDG_CACHE_HOME": "cache"}) == Path("/home/ops/.cache/assetcdn")
    assert model_cache_dir(environ={}) == Path("/home/ops/.cache/assetcdn")


def test_the_weights_are_arrays_over_the_files_own_bytes_equal_to_safetensors_loader() -> None:
    tensors: dict[str, np.ndarray] = {"w": np.arange(12, dtype=np.float32).reshape(3, 4), "ids": np.arange(5, dtype=np.int64),
               "scalar": np.array(2.5, dtype=np.float64)}
    data = save_safetensors(tensors, metadata={"format": "pt"})
    arrays = safetensors_arrays(data)
    assert arrays.keys() == tensors.keys()
    for name, expected in tensors.items():
        assert arrays[name].dtype == expected.dtype and np.array_equal(arrays[name], expected)
        assert np.shares_memory(arrays[name], np.frombuffer(data, np.uint8))   # no copy of the 91 MB
        assert not arrays[name].flags.writeable


@pytest.mark.parametrize("damage", ["short", "header too long", "offsets past the end", "unknown dtype"])
def test_a_malformed_safetensors_file_is_refused(damage: str) -> None:
    data = save_safetensors({"w": np.zeros(4, dtype=np.float32)})
    header_size = int.from_bytes(data[:8], "little")
    bad = {"short": data[:5],
           "header too long": (header_size + 1000).to_bytes(8, "little") + data[8:],
           "offsets past the end": data[:-4],
           "unknown dtype": data.replace(b'"F32"', b'"F99"')}[damage]
    with pytest.raises(ValueError):
        safetensors_arrays(bad)
