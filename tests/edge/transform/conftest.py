"""Real source images for the transform tests (tests/support/transform_images.py), each made once a session."""

from __future__ import annotations

import pytest

from tests.support import transform_images


@pytest.fixture(scope="session")
def photo_jpeg() -> bytes:
    return transform_images.photo_jpeg()


@pytest.fixture(scope="session")
def alpha_png() -> bytes:
    return transform_images.alpha_png()


@pytest.fixture(scope="session")
def animated_gif() -> bytes:
    return transform_images.animated_gif()


@pytest.fixture(scope="session")
def animated_webp() -> bytes:
    return transform_images.animated_webp()


@pytest.fixture(scope="session")
def logo_svg() -> bytes:
    return transform_images.logo_svg()


@pytest.fixture(scope="session")
def hostile_svg() -> bytes:
    return transform_images.hostile_svg()


@pytest.fixture(scope="session")
def face_jpeg() -> bytes:
    return transform_images.face_jpeg()


@pytest.fixture(scope="session")
def bomb_png() -> bytes:
    return transform_images.bomb_png()
