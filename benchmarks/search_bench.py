"""Search quality and latency on a generated catalog (benchmarks/search_data.py).

    .venv/bin/python -m benchmarks.search_bench [--queries-per-run 300]

Quality: for each labelled query, the ranked results of
  - vector:   calibrated MiniLM scores above 0.5 only (what a vector search alone returns),
  - fuzzy:    the original service's token scorer, exactly (substring matches only),
  - fuzzy+typos: ours, with typo credit (what the fallback answers),
  - combined: the product's own decision (control.search.engine.rank: blend, mode, fallback),
scored by recall@5 (share of the query's relevant assets in the top 5) and MRR (1/rank of the first
relevant result in the top 20, 0 when none). Queries written after the tuning are reported apart.

Latency: GET /api/search on a real control app (in process, real git and SQLite, the 336 assets
uploaded), answer cache off, one BLAS thread; wall time (the machine is shared) and the control
process's CPU time per query. Plus model load time, index build time and the memory they take.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one core, before numpy loads

import argparse  # noqa: E402
import asyncio  # noqa: E402
import base64  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from aiohttp.test_utils import TestClient, TestServer  # noqa: E402

from assetcdn.control.app import create_app  # noqa: E402
from assetcdn.control.search import engine as search_engine  # noqa: E402
from assetcdn.control.search.asset_text import describe  # noqa: E402
from assetcdn.control.search.calibration import EDGE_OF_UNRELATED, calibrate  # noqa: E402
from assetcdn.control.search.encoder import load_packaged_model  # noqa: E402
from assetcdn.control.search.engine import FuzzyCatalog, SearchAnswer, align, rank  # noqa: E402
from assetcdn.control.search.fuzzy import FuzzyDocument, fuzzy_scores  # noqa: E402
from assetcdn.control.search.index import VectorSnapshot  # noqa: E402
from assetcdn.control.search.service import SEARCH_INDEX  # noqa: E402
from assetcdn.shared.config import load_settings  # noqa: E402
from assetcdn.shared.manifest import make_entry  # noqa: E402
from assetcdn.shared.secrets import Secrets  # noqa: E402
from benchmarks.measure import load_average, percentile, rss_bytes  # noqa: E402
from benchmarks.search_data import QUERIES, LabelledQuery, catalog  # noqa: E402

KINDS = ("keyword", "synonym", "typo", "descriptive")


def ranked(order: list[int], scores: np.ndarray, floor: float, limit: int = 20) -> list[int]:
    return [i for i in order if scores[i] > floor][:limit]


def metrics(results: list[list[str]], queries: list[LabelledQuery]) -> tuple[float, float]:
    recalls, rrs = [], []
    for found, q in zip(results, queries, strict=True):
        relevant = set(q.relevant)
        recalls.append(len(relevant & set(found[:5])) / len(relevant))
        rank_of = next((i for i, path in enumerate(found) if path in relevant), None)
        rrs.append(0.0 if rank_of is None else 1.0 / (rank_of + 1))
    return float(np.mean(recalls)), float(np.mean(rrs))


def quality() -> None:
    encoder = load_packaged_model().encoder
    paths = catalog()
    entries = [make_entry(p, 1000 + i, "0" * 64, f"{i:040x}", "2026-01-01T00:00:00.000Z") for i, p in enumerate(paths)]
    by_path = {e.path: e for e in entries}

    class Manifest:  # what FuzzyCatalog reads of a ManifestStore
        generation = 1
        entries = by_path

    fuzzy_catalog = FuzzyCatalog()
    fuzzy_catalog.sync(Manifest)  # type: ignore[arg-type]
    documents, vocabulary = fuzzy_catalog.documents, fuzzy_catalog.vocabulary
    doc_paths = [d.entry.path for d in documents]
    matrix = encoder.encode([describe(by_path[p]) for p in doc_paths])
    snapshot = VectorSnapshot.of(tuple(doc_paths), matrix)
    rows = align(documents, snapshot)
    queries = list(QUERIES)
    query_vectors = encoder.encode([q.text for q in queries])
    cosines = query_vectors @ matrix.T

    def run(edge: float = EDGE_OF_UNRELATED) -> dict[str, list[list[str]]]:
        out: dict[str, list[list[str]]] = {"vector": [], "fuzzy": [], "fuzzy+typos": [], "combined": []}
        saved = search_engine.calibrate
        search_engine.calibrate = lambda c: calibrate(c, edge)  # type: ignore[assignment,misc]
        try:
            for qi, q in enumerate(queries):
                vec = calibrate(cosines[qi], edge)
                order = list(np.argsort(-vec, kind="stable"))
                out["vector"].append([doc_paths[i] for i in ranked(order, vec, 0.5)])
                for name, voc in (("fuzzy", ()), ("fuzzy+typos", vocabulary)):
                    fz = np.array(fuzzy_scores(q.text, list(documents), voc))
                    out[name].append([doc_paths[i] for i in ranked(list(np.argsort(-fz, kind="stable")), fz, 0.0)])
                answer: SearchAnswer = rank(q.text, 20, documents, vocabulary, encoder, snapshot, rows)
                out["combined"].append([h.entry.path for h in answer.hits])
        finally:
            search_engine.calibrate = saved
        return out

    results = run()
    tuned = [i for i, q in enumerate(queries) if not q.held_out]
    held = [i for i, q in enumerate(queries) if q.held_out]
    print(f"\nCatalog: {len(paths)} assets; queries: {len(tuned)} tuning + {len(held)} held out\n")
    print("| engine | recall@5 (all) | MRR (all) | recall@5 tuning | MRR tuning | recall@5 held out | MRR held out |")
    print("|---|---|---|---|---|---|---|")
    for name, found in results.items():
        cells = []
        for subset in (list(range(len(queries))), tuned, held):
            r, m = metrics([found[i] for i in subset], [queries[i] for i in subset])
            cells += [f"{r:.3f}", f"{m:.3f}"]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("\nMRR by kind of query (all queries):\n")
    print("| engine | " + " | ".join(f"{k} ({sum(q.kind == k for q in queries)})" for k in KINDS) + " |")
    print("|---|" + "---|" * len(KINDS))
    for name, found in results.items():
        cells = []
        for kind in KINDS:
            subset = [i for i, q in enumerate(queries) if q.kind == kind]
            cells.append(f"{metrics([found[i] for i in subset], [queries[i] for i in subset])[1]:.3f}")
        print(f"| {name} | " + " | ".join(cells) + " |")

    # The calibration point: raw MiniLM cosines of matches and non-matches (tuning queries only).
    related: list[float] = []
    unrelated: list[float] = []
    for qi in tuned:
        relevant = set(queries[qi].relevant)
        for j, path in enumerate(doc_paths):
            (related if path in relevant else unrelated).append(cosines[qi, j])
    print("\nRaw MiniLM cosine, tuning queries x catalog:\n")
    print("| pairs | n | p10 | p50 | p90 | p95 | p99 |")
    print("|---|---|---|---|---|---|---|")
    for label, values in (("relevant", related), ("not relevant", unrelated)):
        p = [percentile(values, fraction) for fraction in (0.1, 0.5, 0.9, 0.95, 0.99)]
        print(f"| {label} | {len(values)} | " + " | ".join(f"{x:.3f}" for x in p) + " |")
    combined_mode = [rank(q.text, 20, documents, vocabulary, encoder, snapshot, rows).mode for q in queries]
    print(f"\nCombined answered in mode vector for {combined_mode.count('vector')} of {len(queries)} queries, "
          f"fuzzy for {combined_mode.count('fuzzy')}.")
    print("\nSensitivity to the calibration point (combined, all queries):\n")
    print("| MiniLM cosine mapped to 0.5 | recall@5 | MRR | results per query (mean) | of them not relevant |")
    print("|---|---|---|---|---|")
    for edge in (0.20, 0.25, 0.30, 0.35, 0.40):
        found = run(edge)["combined"]
        r, m = metrics(found, queries)
        returned = float(np.mean([len(f) for f in found]))
        noise = float(np.mean([len([p for p in f if p not in set(q.relevant)]) for f, q in zip(found, queries, strict=True)]))
        print(f"| {edge:.2f}{' (chosen)' if edge == EDGE_OF_UNRELATED else ''} | {r:.3f} | {m:.3f} | "
              f"{returned:.1f} | {noise:.1f} |")


async def latency(count: int) -> None:
    secrets = Secrets(access_key="bench-access", account_key="bench-account", purge_key="bench-purge",
                      analytics_key="bench-analytics", signed_url_secret="bench-signed", cluster_secret="bench-cluster",
                      session_secret="bench-session", metrics_key="bench-metrics")
    settings = load_settings(environ={"ASSETCDN_SEARCH_CACHE_TTL_S": "0",
                                      "ASSETCDN_SEARCH_RATE_LIMIT_PER_MINUTE": "1000000"})
    paths = catalog()
    with tempfile.TemporaryDirectory() as tmp:
        app = create_app(settings, secrets, Path(tmp) / "data")
        async with TestClient(TestServer(app)) as client:
            index = app[SEARCH_INDEX]
            await index.model()
            for zone in sorted({p.split("/")[0] for p in paths if not p.startswith("stocks/")}):
                async with client.post("/api/core/zones", json={"Name": zone},
                                       headers={"AccountKey": secrets.account_key}) as resp:
                    assert resp.status == 201, await resp.text()
            build_started = time.perf_counter()
            cpu_started = time.process_time()
            for start in range(0, len(paths), 50):
                files = [{"path": p, "content": base64.b64encode(p.encode()).decode()} for p in paths[start:start + 50]]
                async with client.post("/api/storage/batch", json={"files": files},
                                       headers={"AccessKey": secrets.access_key}) as resp:
                    assert resp.status == 201, await resp.text()
            await index.settled(max_backlog=10**9)
            build_wall, build_cpu = time.perf_counter() - build_started, time.process_time() - cpu_started
            texts = [q.text for q in QUERIES]
            for text in texts[:10]:  # warm
                async with client.get("/api/search", params={"q": text}) as resp:
                    await resp.read()
            walls, cpus = [], []
            for i in range(count):
                text = texts[i % len(texts)]
                t0, c0 = time.perf_counter(), time.process_time()
                async with client.get("/api/search", params={"q": text}) as resp:
                    assert resp.status == 200
                    await resp.read()
                walls.append((time.perf_counter() - t0) * 1000)
                cpus.append((time.process_time() - c0) * 1000)
        loadavg = load_average()

    print(f"\nLatency, GET /api/search over {len(paths)} assets, {count} queries, cache off, one BLAS thread "
          f"(load average {loadavg} on 2 cores):\n")
    print("| measure | p50 ms | p99 ms | mean ms |")
    print("|---|---|---|---|")
    print(f"| wall time per request (client + server in one process) | {percentile(walls, 0.50):.1f} | {percentile(walls, 0.99):.1f} | "
          f"{statistics.fmean(walls):.1f} |")
    print(f"| CPU time per request (both sides, all threads) | {percentile(cpus, 0.50):.1f} | {percentile(cpus, 0.99):.1f} | "
          f"{statistics.fmean(cpus):.1f} |")
    print(f"Index build for {len(paths)} assets (7 batch uploads, embedding on the index thread): "
          f"{build_wall:.2f} s wall, {build_cpu:.2f} s CPU for the whole process.")


def encoder_latency(count: int) -> None:
    encoder = load_packaged_model().encoder
    texts = [q.text for q in QUERIES]
    for text in texts[:5]:
        encoder.encode_one(text)
    walls, cpus = [], []
    for i in range(count):
        t0, c0 = time.perf_counter(), time.process_time()
        encoder.encode_one(texts[i % len(texts)])
        walls.append((time.perf_counter() - t0) * 1000)
        cpus.append((time.process_time() - c0) * 1000)
    docs = [FuzzyDocument.of(make_entry(p, 1, "0" * 64, "0" * 40, "2026-01-01T00:00:00.000Z")) for p in catalog()]
    vocabulary = frozenset().union(*(d.words for d in docs))
    fuzzy_cpu = []
    for i in range(count):
        c0 = time.process_time()
        fuzzy_scores(texts[i % len(texts)], docs, vocabulary)
        fuzzy_cpu.append((time.process_time() - c0) * 1000)
    print(f"\nQuery embedding alone ({count} queries, 3-9 tokens): wall p50 {percentile(walls, 0.50):.1f} ms, "
          f"p99 {percentile(walls, 0.99):.1f} ms; CPU p50 {percentile(cpus, 0.50):.1f} ms, "
          f"p99 {percentile(cpus, 0.99):.1f} ms.")
    print(f"Fuzzy scoring of {len(docs)} assets alone: CPU p50 {percentile(fuzzy_cpu, 0.50):.1f} ms, "
          f"p99 {percentile(fuzzy_cpu, 0.99):.1f} ms.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries-per-run", type=int, default=300)
    args = parser.parse_args()
    rss_before = rss_bytes([os.getpid()])
    model = load_packaged_model()
    print(f"Model: all-MiniLM-L6-v2 from the packaged zip, loaded in {model.load_seconds:.2f} s; "
          f"RSS +{(rss_bytes([os.getpid()]) - rss_before) / 2**20:.0f} MB with the weights (peak "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB while reading the zip).")
    quality()
    encoder_latency(args.queries_per_run)
    asyncio.run(latency(args.queries_per_run))


if __name__ == "__main__":
    main()
