"""Image analysis requests from asset to answer: look up, replay from cache or spend budget, compute
in the pool within the time budget, remember.

Which engine answers:
- smart crop: always local (assetcdn/shared/faces.py and libvips saliency);
- moderation: NudeNet for nudity; the configured vision endpoint, when set, scores the other four
  categories (and nudity too: the higher score counts);
- alt text: the configured vision endpoint when set, else (or when it fails) the local sentence.
Each answer carries `model` and `engine`; `degraded` is true when something expected did not answer.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from assetcdn.control.ai.moderation import (
    CATEGORIES,
    Moderation,
    NudityDetector,
    moderate_locally,
)
from assetcdn.control.ai.pool import (
    AnalysisBusy,
    AnalysisPool,
    AnalysisTimedOut,
    busy,
    check_deadline,
    timed_out,
)
from assetcdn.control.ai.results_cache import ResultsCache
from assetcdn.control.ai.vision_endpoint import (
    ALT_PROMPT,
    MODERATION_PROMPT,
    EndpointFailed,
    EndpointSettings,
    VisionEndpoint,
    clean_alt,
    moderation_scores,
)
from assetcdn.control.storage.database import Database
from assetcdn.control.storage.git_store import GitStore
from assetcdn.shared.counter_store import Counters
from assetcdn.shared.errors import ApiError, not_found
from assetcdn.shared.faces import DETECT_SIZE, DETECTOR, detect_faces_rgb
from assetcdn.shared.limits import ai_vision_per_day
from assetcdn.shared.manifest import ManifestEntry
from assetcdn.shared.timestamps import utc_now_iso

if TYPE_CHECKING:
    from assetcdn.control.ai.image_input import AnalysisImage

# The analyses' own modules (libvips, numpy, pillow-heif) are imported by the first analysis that needs them:
# a control plane starts without them and most never run one.

KINDS = ("alt-text", "moderate", "smart-crop")
ANALYSIS_SIZE = DETECT_SIZE        # the faces are found on the same copy every analysis reads
ENDPOINT_IMAGE_SIZE = 768
PRIVATE_CATEGORY = "private"
TRANSIENT = "_transient"           # internal flag on fields that must not be cached


@dataclass(frozen=True)
class AiVisionSettings:
    daily_budget: int
    cache_ttl_s: float
    time_budget_s: float
    concurrency: int
    max_source_pixels: int
    ocr_timeout_s: float
    endpoint: EndpointSettings | None

    @staticmethod
    def from_section(section: dict[str, Any]) -> AiVisionSettings:
        url = str(section.get("endpoint_url", "")).strip()
        endpoint = None
        if url:
            endpoint = EndpointSettings(url, str(section.get("endpoint_model", "")),
                                        str(section.get("endpoint_api_key", "")),
                                        float(section.get("endpoint_timeout_s", 30.0)))
        return AiVisionSettings(daily_budget=int(section.get("daily_budget", 5000)),
                                cache_ttl_s=float(section.get("cache_ttl_s", 86400)),
                                time_budget_s=float(section.get("time_budget_s", 15.0)),
                                concurrency=int(section.get("concurrency", 1)),
                                max_source_pixels=int(section.get("max_source_pixels", 50_000_000)),
                                ocr_timeout_s=float(section.get("ocr_timeout_s", 5.0)),
                                endpoint=endpoint)


class ImageAnalysis:
    def __init__(self, git: GitStore, entries: Callable[[], dict[str, ManifestEntry]],
                 db: Database, settings: AiVisionSettings, counters: Counters) -> None:
        self.git = git
        self._entries = entries
        self.settings = settings
        self.cache = ResultsCache(db, settings.cache_ttl_s)
        self.counters = counters  # the daily budget is counted in the shared counter store
        self.budget = ai_vision_per_day(settings.daily_budget)
        self.pool = AnalysisPool(settings.concurrency)
        self.nudity = NudityDetector.shared()
        self.endpoint = VisionEndpoint(settings.endpoint) if settings.endpoint else None
        self._inflight: dict[tuple[str, str, str], asyncio.Task[dict[str, Any]]] = {}
        # Alt text known per CDN path (with the blob it describes), so search can use its words;
        # `alt_text_listeners` are told each path whose alt text became known.
        self._alt_texts: dict[str, tuple[str, str]] = {}
        self.alt_text_listeners: list[Callable[[str], None]] = []

    async def open(self) -> None:
        await self.cache.open()
        self._alt_texts = await self.cache.alt_texts()

    def alt_text_for(self, cdn_path: str) -> str | None:
        """The alt text computed for the bytes the path holds now, if any is kept."""
        known = self._alt_texts.get(cdn_path)
        entry = self._entries().get(cdn_path)
        return known[1] if known is not None and entry is not None and entry.blob_id == known[0] else None

    async def close(self) -> None:
        self.pool.close()
        if self.endpoint is not None:
            await self.endpoint.close()

    def _engine(self, kind: str) -> str:
        return "endpoint" if self.endpoint is not None and kind != "smart-crop" else "local"

    async def analyse(self, kind: str, cdn_path: str, *, allow_private: bool) -> tuple[dict[str, Any], bool]:
        """The answer's fields for `kind` on the asset at `cdn_path`, and whether it came from the cache."""
        entry = self._entries().get(cdn_path)
        if entry is None:
            raise not_found(f"No asset at '/{cdn_path}'.", target="url", code="AssetNotFound")
        if entry.category == PRIVATE_CATEGORY and not allow_private:
            raise ApiError(403, "Forbidden", f"'/{cdn_path}' is in the private category: only AccessKey or "
                           "AccountKey callers may have it analysed.", target="url")
        key = (f"{kind}:{self._engine(kind)}", cdn_path, entry.blob_id)
        cached = await self.cache.get(*key)
        if cached is not None:
            return cached, True
        task = self._inflight.get(key)
        if task is None:  # one computation per asset version at a time; others wait for its answer
            task = asyncio.ensure_future(self._compute_and_keep(kind, entry, key))
            self._inflight[key] = task
            task.add_done_callback(lambda done: self._finished(key, done))
        return await asyncio.shield(task), False

    def _finished(self, key: tuple[str, str, str], task: asyncio.Task[dict[str, Any]]) -> None:
        self._inflight.pop(key, None)
        if not task.cancelled():
            task.exception()  # retrieved: every waiter may have gone (clients disconnected)

    async def _compute_and_keep(self, kind: str, entry: ManifestEntry, key: tuple[str, str, str]) -> dict[str, Any]:
        from assetcdn.control.ai.image_input import ImageInputError  # noqa: PLC0415 (before any budget is spent)

        spent, retry_after = True, max(math.ceil(self.budget.window_at()), 1)  # a budget of 0: off
        decision = None
        if self.settings.daily_budget > 0:
            decision = await self.counters.hit(self.budget)
            spent, retry_after = not decision.allowed, decision.retry_after_s()
        if spent:
            raise ApiError(503, "AiUnavailable", f"The daily AI compute budget ({self.settings.daily_budget} "
                           "analyses) is spent; it resets at 00:00 UTC. Answers already computed are still "
                           "served from the cache.", headers={"Retry-After": str(retry_after)})
        budget_s = self.settings.time_budget_s
        if self._engine(kind) == "endpoint" and self.settings.endpoint is not None:
            budget_s += self.settings.endpoint.timeout_s
        deadline = time.monotonic() + budget_s
        try:
            data = await self.git.run(self.git.read_blob, entry.blob_id)
            if data is None:  # the asset was deleted since the manifest was read
                await self.counters.refund(decision)
                raise not_found(f"No asset at '/{entry.path}'.", target="url", code="AssetNotFound")
            compute = {"alt-text": self._alt_text, "moderate": self._moderate, "smart-crop": self._smart_crop}[kind]
            fields = await compute(entry, data, deadline)
        except ImageInputError as exc:
            await self.counters.refund(decision)  # nothing was analysed
            raise ApiError(exc.status, exc.code, exc.message, target="url") from None
        except AnalysisBusy:
            await self.counters.refund(decision)
            raise busy(self.pool.held) from None
        except AnalysisTimedOut:
            raise timed_out(budget_s) from None  # the time was spent: the budget keeps it
        except ApiError:
            raise  # refunded above where nothing was analysed (a missing asset)
        except BaseException:
            await self.counters.refund(decision)  # an unexpected failure (500): nothing analysed, nothing kept
            raise
        fields["dateGenerated"] = utc_now_iso()
        # A local answer standing in for a failed endpoint is not kept: the endpoint may be back soon.
        if not fields.pop(TRANSIENT, False):
            await self.cache.put(*key, fields)
            if kind == "alt-text" and isinstance(fields.get("alt"), str):
                self._alt_texts[entry.path] = (entry.blob_id, fields["alt"])
                for listener in self.alt_text_listeners:
                    listener(entry.path)
        return fields

    def _load(self, data: bytes) -> AnalysisImage:
        from assetcdn.control.ai.image_input import load_for_analysis  # noqa: PLC0415
        return load_for_analysis(data, max_pixels=self.settings.max_source_pixels, size=ANALYSIS_SIZE)

    async def _run(self, work: Callable[[], Any], deadline: float) -> Any:
        return await self.pool.run(work, deadline)

    # --- smart crop ---

    async def _smart_crop(self, entry: ManifestEntry, data: bytes, deadline: float) -> dict[str, Any]:
        from assetcdn.control.ai.smart_crop import MODEL as SMART_CROP_MODEL  # noqa: PLC0415
        from assetcdn.control.ai.smart_crop import smart_crop  # noqa: PLC0415

        def work() -> dict[str, Any]:
            source = self._load(data)
            check_deadline(deadline)
            return {**smart_crop(source).fields(), "width": source.width, "height": source.height}
        found = await self._run(work, deadline)
        return {**found, "model": SMART_CROP_MODEL, "engine": "local", "degraded": False}

    # --- moderation ---

    async def _moderate(self, entry: ManifestEntry, data: bytes, deadline: float) -> dict[str, Any]:
        want_jpeg = self.endpoint is not None

        def work() -> tuple[Moderation, bytes | None]:
            source = self._load(data)
            check_deadline(deadline)
            result = moderate_locally(self.nudity, source.pixels)
            jpeg = _jpeg(source, ENDPOINT_IMAGE_SIZE) if want_jpeg else None
            return result, jpeg
        result, jpeg = await self._run(work, deadline)
        if self.endpoint is not None and jpeg is not None:
            await self._moderate_with_endpoint(self.endpoint, result, jpeg, deadline)
        return {**result.fields(), TRANSIENT: result.endpoint_failed}

    async def _moderate_with_endpoint(self, endpoint: VisionEndpoint, result: Moderation, jpeg: bytes,
                                      deadline: float) -> None:
        try:
            reply = await endpoint.ask(MODERATION_PROMPT, jpeg, max_tokens=200,
                                       timeout_s=deadline - time.monotonic())
        except EndpointFailed as exc:
            result.reasoning += f" The vision endpoint did not answer: {exc}."
            result.endpoint_failed = True
            return
        parsed = moderation_scores(reply)
        result.model = f"{result.model}+{endpoint.name}"
        result.engine = "local+endpoint"
        if parsed is None:
            result.unparseable = True
            result.reasoning += " The vision endpoint's reply was not a usable verdict."
            return
        scores, reasoning = parsed
        for category in CATEGORIES:
            local = result.categories.get(category)
            result.categories[category] = scores[category] if local is None else max(local, scores[category])
        if reasoning:
            result.reasoning += f" {endpoint.name}: {reasoning}"

    # --- alt text ---

    async def _alt_text(self, entry: ManifestEntry, data: bytes, deadline: float) -> dict[str, Any]:
        from assetcdn.control.ai.alt_text import MAX_ALT, describe  # noqa: PLC0415
        from assetcdn.control.ai.ocr import OCR_SIZE, read_text, tesseract  # noqa: PLC0415

        note = ""
        if self.endpoint is not None:
            endpoint = self.endpoint
            jpeg = await self._run(lambda: _jpeg(self._load(data), ENDPOINT_IMAGE_SIZE), deadline)
            try:
                reply = await endpoint.ask(ALT_PROMPT.format(name=entry.name), jpeg, max_tokens=120,
                                           timeout_s=deadline - time.monotonic())
                alt = clean_alt(reply, MAX_ALT)
                if alt:
                    return {"alt": alt, "model": endpoint.name, "engine": "endpoint", "signals": ["vision-model"],
                            "degraded": False}
                note = "the vision endpoint sent no usable text"
            except EndpointFailed as exc:
                note = str(exc)
        ocr_timeout = self.settings.ocr_timeout_s

        def work() -> dict[str, Any]:
            source = self._load(data)
            check_deadline(deadline)
            faces = detect_faces_rgb(source.pixels)
            check_deadline(deadline)
            ocr = None
            if source.svg is None:
                ocr = read_text(source.render(OCR_SIZE), min(ocr_timeout, deadline - time.monotonic()))
                check_deadline(deadline)
            found = describe(source, entry, faces, ocr)
            return {"alt": found.alt, "signals": list(found.signals)}
        found = await self._run(work, deadline)
        found_tesseract = tesseract()
        engines = [DETECTOR] + ([f"tesseract-{found_tesseract[1]}"] if found_tesseract else [])
        fields = {**found, "model": "local:" + "+".join(engines), "engine": "local", "degraded": bool(note)}
        if note:
            fields["note"] = f"The configured vision endpoint did not answer ({note}); the local engine did."
            fields[TRANSIENT] = True
        return fields


def _jpeg(source: AnalysisImage, size: int) -> bytes:
    larger = max(source.width, source.height) > max(source.image.width, source.image.height)
    image = source.render(size) if larger else source.image
    return image.jpegsave_buffer(Q=85, strip=True)

