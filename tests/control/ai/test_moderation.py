"""Moderation: NudeNet's packaged model runs for real; the four other categories are not evaluated."""

from __future__ import annotations

import numpy as np
import skimage.data

from assetcdn.control.ai.moderation import (
    CATEGORIES,
    Detection,
    Moderation,
    NudityDetector,
    moderate_locally,
    nudity_score,
    verdict_of,
)
from tests.support.control import ACCESS, MakeControl
from tests.support.photos import astronaut_jpeg, upload


def test_the_packaged_model_sees_the_astronauts_face() -> None:
    found = NudityDetector.shared().detect(np.ascontiguousarray(skimage.data.astronaut()))
    faces = [d for d in found if d.label == "FACE_FEMALE"]
    assert faces, found
    x, y, w, h = faces[0].box
    assert 150 <= x + w / 2 <= 260 and 80 <= y + h / 2 <= 180
    assert nudity_score(found)[0] < 0.25


def test_everyday_photographs_are_safe() -> None:
    for pixels in (skimage.data.astronaut(), skimage.data.coffee(), skimage.data.chelsea(), skimage.data.rocket()):
        result = moderate_locally(NudityDetector.shared(), np.ascontiguousarray(pixels))
        assert result.verdict == "safe", result.reasoning
        assert result.evaluated == ["nudity"]


async def test_the_answer_says_what_was_not_evaluated(make_control: MakeControl) -> None:
    client = await make_control()
    await upload(client, "akande/v1/banners/astronaut.jpg", astronaut_jpeg())
    resp = await client.get("/api/ai/moderate", params={"url": "akande/v1/banners/astronaut.jpg"}, headers=ACCESS)
    body = await resp.json()
    assert resp.status == 200, body
    assert (body["safe"], body["verdict"], body["degraded"], body["evaluated"]) == (True, "safe", True, ["nudity"])
    assert 0 <= body["categories"]["nudity"] < 0.25
    assert all(body["categories"][c] is None for c in CATEGORIES if c != "nudity")
    assert "violence, drugs, hate symbols, gore" in body["reasoning"] and body["model"].startswith("nudenet-")


def test_exposed_parts_count_fully_and_covered_ones_reach_borderline_at_most() -> None:
    exposed = [Detection("FEMALE_BREAST_EXPOSED", 0.8, (0, 0, 10, 10)), Detection("FACE_FEMALE", 0.9, (0, 0, 5, 5))]
    assert nudity_score(exposed) == (0.8, exposed[0])
    covered = [Detection("FEMALE_BREAST_COVERED", 0.95, (0, 0, 10, 10))]
    score, _ = nudity_score(covered)
    assert verdict_of({"nudity": score}) == "borderline"
    assert nudity_score([Detection("FEET_EXPOSED", 0.99, (0, 0, 1, 1))]) == (0.0, None)


def test_the_verdict_comes_from_what_was_evaluated() -> None:
    assert verdict_of({"nudity": 0.1, "violence": None}) == "safe"
    assert verdict_of({"nudity": 0.3, "violence": None}) == "borderline"
    assert verdict_of({"nudity": 0.1, "violence": 0.7}) == "unsafe"
    unparseable = Moderation({c: None for c in CATEGORIES} | {"nudity": 0.0}, "", "m", unparseable=True)
    assert unparseable.verdict == "borderline" and unparseable.fields()["degraded"] is True
