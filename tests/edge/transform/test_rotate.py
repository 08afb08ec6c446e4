"""rotate and EXIF orientation on real images: where a marked corner ends up, and the sizes."""

from __future__ import annotations

import pytest
import pyvips

from assetcdn.edge.transform.budgets import TransformLimits
from assetcdn.edge.transform.options import parse_transform_options
from assetcdn.edge.transform.steps import TransformResult, run_transform
from assetcdn.shared.errors import LegacyError
from tests.support.transform_images import FRAMES, load

RED, BLUE = [200, 30, 30], [30, 30, 220]
WIDTH, HEIGHT, MARK = 300, 200, 40     # a red landscape with a blue square in its top-left corner


def marked(orientation: int = 1) -> bytes:
    image = (pyvips.Image.black(WIDTH, HEIGHT).new_from_image(RED).copy(interpretation="srgb").cast("uchar")
             .draw_rect(BLUE, 0, 0, MARK, MARK, fill=True))
    if orientation != 1:
        image = image.copy()
        image.set_type(pyvips.GValue.gint_type, "orientation", orientation)
    return image.pngsave_buffer()


def transform(source: bytes, output: str = "png", source_format: str = "png", **query: str) -> TransformResult:
    opts = parse_transform_options({"url": "akande/v1/banners/x.png", **query})
    return run_transform(source, source_format, opts, output, TransformLimits(max_pixels=50_000_000, time_budget_s=30))


def blue_corner(data: bytes) -> str:
    """Which corner of the output holds the blue mark."""
    image = load(data)
    corners = {"top-left": (5, 5), "top-right": (image.width - 6, 5), "bottom-left": (5, image.height - 6),
               "bottom-right": (image.width - 6, image.height - 6)}
    blue = [name for name, (x, y) in corners.items() if image.getpoint(x, y)[2] > 150]
    assert len(blue) == 1, blue
    return blue[0]


@pytest.mark.parametrize(("angle", "size", "corner"), [
    ("90", (HEIGHT, WIDTH), "top-right"), ("180", (WIDTH, HEIGHT), "bottom-right"),
    ("270", (HEIGHT, WIDTH), "bottom-left"), ("0", (WIDTH, HEIGHT), "top-left"),
])
def test_rotate_turns_clockwise(angle: str, size: tuple[int, int], corner: str) -> None:
    result = transform(marked(), rotate=angle)
    assert (result.width, result.height) == size
    assert blue_corner(result.body) == corner


def test_w_and_h_size_the_rotated_output() -> None:
    only_width = transform(marked(), rotate="90", w="100")
    assert (only_width.width, only_width.height) == (100, 150)
    assert blue_corner(only_width.body) == "top-right"
    cover = transform(marked(), rotate="270", w="100", h="120")
    assert (cover.width, cover.height) == (100, 120)


def test_a_jpeg_shrunk_on_load_is_rotated_after(photo_jpeg: bytes) -> None:
    result = transform(photo_jpeg, "jpeg", "jpeg", rotate="90", w="200")
    assert (result.width, result.height) == (200, 300)     # a 2000x1333 landscape turned portrait


@pytest.mark.parametrize(("orientation", "corner"), [(3, "bottom-right"), (6, "top-right"), (8, "bottom-left")])
def test_exif_orientation_is_applied(orientation: int, corner: str) -> None:
    source = marked(orientation)
    expected = pyvips.Image.new_from_buffer(source, "").autorot()
    result = transform(source)
    assert (result.width, result.height) == (expected.width, expected.height)
    assert blue_corner(result.body) == corner


def test_exif_orientation_then_w_keeps_the_aspect_ratio() -> None:
    # Stored 300x200 and tagged "turn 90 degrees": shown 200x300, so w=100 is 100x150, not squashed to 100x67.
    result = transform(marked(6), w="100")
    assert (result.width, result.height) == (100, 150)
    assert blue_corner(result.body) == "top-right"


def test_rotate_adds_to_the_exif_orientation() -> None:
    result = transform(marked(6), rotate="90", w="150")
    assert (result.width, result.height) == (150, 100)
    assert blue_corner(result.body) == "bottom-right"


def test_animation_is_rotated_frame_by_frame(animated_gif: bytes) -> None:
    result = transform(animated_gif, "gif", "gif", rotate="90")
    decoded = load(result.body)
    assert result.pages == FRAMES
    assert (decoded.width, decoded.get_page_height()) == (200, 300)


@pytest.mark.parametrize("bad", ["45", "-90", "360", "ninety", ""])
def test_other_angles_are_refused(bad: str) -> None:
    with pytest.raises(LegacyError) as caught:
        parse_transform_options({"url": "a/v1/x.png", "rotate": bad})
    assert caught.value.status == 400
    assert caught.value.error == f"Invalid parameter 'rotate': '{bad}'. Allowed values: 0, 90, 180, 270."


def test_cache_key() -> None:
    def key(**query: str) -> str:
        return parse_transform_options({"url": "a/v1/x.png", **query}).cache_key("b", "png")
    assert key(rotate="90", w="10") == "tf1/b/rot90-w10.png"
    assert key(rotate="0", w="10") == key(w="10") == "tf1/b/w10.png"
