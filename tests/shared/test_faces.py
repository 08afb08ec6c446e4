"""The shared face detector on real photographs (scikit-image's, and the astronaut's head pasted onto
plain backgrounds: a histogram-equalising detector misses that case)."""

from __future__ import annotations

import numpy as np
import pytest
import pyvips
import skimage.data

from assetcdn.shared.faces import (
    DETECT_SIZE,
    detect_faces,
    detect_faces_haar,
    detect_faces_rgb,
    face_boxes,
)


def centre_inside(box: tuple[int, int, int, int], area: tuple[int, int, int, int]) -> bool:
    x, y, w, h = box
    ax, ay, aw, ah = area
    return ax <= x + w / 2 <= ax + aw and ay <= y + h / 2 <= ay + ah


def test_the_astronaut_and_the_cameraman_have_one_face_each() -> None:
    astronaut = detect_faces_rgb(np.ascontiguousarray(skimage.data.astronaut()))
    assert len(astronaut) == 1 and centre_inside(astronaut[0].box, (180, 70, 90, 110))
    assert 0.6 <= astronaut[0].score <= 1
    camera = detect_faces(pyvips.Image.new_from_array(skimage.data.camera()))
    assert len(camera) == 1 and centre_inside(camera[0].box, (190, 110, 70, 90))


@pytest.mark.parametrize("name", ["coffee", "chelsea", "rocket", "coins", "brick"])
def test_photographs_without_people_have_no_face(name: str) -> None:
    assert detect_faces(pyvips.Image.new_from_array(getattr(skimage.data, name)())) == []


@pytest.mark.parametrize("background", [255, 235, 128, 20])
@pytest.mark.parametrize("scale", [0.5, 1.0])
def test_a_face_on_a_mostly_plain_background_is_found(background: int, scale: float) -> None:
    head = pyvips.Image.new_from_array(np.ascontiguousarray(skimage.data.astronaut()[40:200, 150:300])).resize(scale)
    canvas = pyvips.Image.black(900, 600, bands=3).new_from_image([background] * 3).copy(interpretation="srgb")
    frame = canvas.insert(head.copy(interpretation="srgb"), 650, 40)
    boxes = face_boxes(frame)
    assert len(boxes) == 1 and centre_inside(boxes[0], (650, 40, head.width, head.height))


def test_boxes_are_in_the_frames_own_coordinates_and_alpha_is_handled() -> None:
    big = pyvips.Image.new_from_array(skimage.data.astronaut()).resize(3)   # 1536 px: analysed at DETECT_SIZE
    assert big.width > DETECT_SIZE
    with_alpha = big.bandjoin(255)
    boxes = face_boxes(with_alpha)
    assert len(boxes) == 1 and centre_inside(boxes[0], (540, 210, 270, 330))


def test_tiny_and_grey_images_do_not_break_it() -> None:
    assert face_boxes(pyvips.Image.black(3, 2)) == []
    assert face_boxes(pyvips.Image.black(40, 30, bands=2)) == []


@pytest.mark.parametrize("background", [255, 128, 20])
def test_the_fallback_cascade_also_finds_a_face_on_a_plain_background(background: int) -> None:
    head = np.ascontiguousarray(skimage.data.astronaut()[40:200, 150:300])
    canvas = np.full((600, 900, 3), background, np.uint8)
    canvas[40:200, 650:800] = head
    faces = detect_faces_haar(canvas)
    assert len(faces) == 1 and centre_inside(faces[0].box, (650, 40, 150, 160))
