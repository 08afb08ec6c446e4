"""run_transform on real images: formats, fit semantics, gravity, animation, SVG, budgets."""

from __future__ import annotations

import io
import time
from concurrent.futures import ThreadPoolExecutor

import pillow_heif
import pytest
import pyvips

from assetcdn.edge.transform import steps
from assetcdn.edge.transform.budgets import TransformLimits
from assetcdn.edge.transform.context import TransformContext
from assetcdn.edge.transform.decode import decode
from assetcdn.edge.transform.encode import ENCODERS
from assetcdn.edge.transform.options import parse_transform_options
from assetcdn.edge.transform.source import read_source
from assetcdn.edge.transform.steps import TransformResult, run_transform
from assetcdn.shared.errors import LegacyError
from tests.support.transform_images import FACE_CENTER, FRAMES, PHOTO_SIZE, load

MAX_PIXELS = 50_000_000
LOADERS = {"webp": "webpload_buffer", "jpeg": "jpegload_buffer", "png": "pngload_buffer",
           "avif": "heifload_buffer", "gif": "gifload_buffer"}


def transform(source: bytes, source_format: str, output: str, *, budget: float = 30.0,
              max_pixels: int = MAX_PIXELS, limits: dict[str, int] | None = None, **query: str) -> TransformResult:
    opts = parse_transform_options({"url": "akande/v1/banners/x." + source_format, **query})
    return run_transform(source, source_format, opts, output,
                         TransformLimits(max_pixels=max_pixels, time_budget_s=budget, **(limits or {})))


@pytest.mark.parametrize("output", ["webp", "jpeg", "png", "avif", "gif"])
def test_photo_to_400px_in_each_format(photo_jpeg: bytes, output: str) -> None:
    result = transform(photo_jpeg, "jpeg", output, w="400")
    decoded = load(result.body)
    assert decoded.get("vips-loader") == LOADERS[output]
    assert (decoded.width, decoded.height) == (400, 267) == (result.width, result.height)
    assert result.format == output and result.pages == 1
    assert result.content_type == f"image/{output}"


def test_only_height_keeps_aspect(photo_jpeg: bytes) -> None:
    decoded = load(transform(photo_jpeg, "jpeg", "jpeg", h="200").body)
    assert (decoded.width, decoded.height) == (300, 200)


def test_no_size_keeps_source_size(photo_jpeg: bytes) -> None:
    decoded = load(transform(photo_jpeg, "jpeg", "webp", q="50").body)
    assert (decoded.width, decoded.height) == PHOTO_SIZE


@pytest.mark.parametrize(("w", "h"), [(400, 400), (300, 500), (800, 100), (3000, 3000)])
def test_cover_is_exactly_w_by_h(photo_jpeg: bytes, w: int, h: int) -> None:
    decoded = load(transform(photo_jpeg, "jpeg", "jpeg", w=str(w), h=str(h), fit="cover").body)
    assert (decoded.width, decoded.height) == (w, h)


@pytest.mark.parametrize(("w", "h", "expected"), [(400, 400, (400, 267)), (300, 500, (300, 200)),
                                                  (800, 100, (150, 100)), (4000, 4000, (4000, 2666))])
def test_contain_fits_within_and_keeps_aspect(photo_jpeg: bytes, w: int, h: int, expected: tuple[int, int]) -> None:
    decoded = load(transform(photo_jpeg, "jpeg", "jpeg", w=str(w), h=str(h), fit="contain").body)
    assert (decoded.width, decoded.height) == expected
    assert decoded.width <= w and decoded.height <= h
    assert abs(decoded.width / decoded.height - PHOTO_SIZE[0] / PHOTO_SIZE[1]) < 0.02


@pytest.mark.parametrize(("w", "h", "expected"), [(400, 400, (400, 267)), (300, 500, (300, 200)), (4000, 4000, (4000, 2666))])
def test_inside_is_contain(photo_jpeg: bytes, w: int, h: int, expected: tuple[int, int]) -> None:
    # JPEG out: the same pixels give the same bytes, and a 4000 px PNG costs seconds to encode twice.
    inside = transform(photo_jpeg, "jpeg", "jpeg", w=str(w), h=str(h), fit="inside")
    assert (inside.width, inside.height) == expected
    assert inside.body == transform(photo_jpeg, "jpeg", "jpeg", w=str(w), h=str(h), fit="contain").body


@pytest.mark.parametrize(("w", "h", "expected"), [(400, 400, (600, 400)), (300, 500, (750, 500)), (800, 100, (800, 533))])
def test_outside_covers_without_cropping(photo_jpeg: bytes, w: int, h: int, expected: tuple[int, int]) -> None:
    decoded = load(transform(photo_jpeg, "jpeg", "png", w=str(w), h=str(h), fit="outside", gravity="east").body)
    assert (decoded.width, decoded.height) == expected
    assert decoded.width >= w and decoded.height >= h
    assert abs(decoded.width / decoded.height - PHOTO_SIZE[0] / PHOTO_SIZE[1]) < 0.02


# Where each compass gravity keeps the crop: 0 = left/top, 1 = middle, 2 = right/bottom.
COMPASS = {"northwest": (0, 0), "north": (1, 0), "northeast": (2, 0), "west": (0, 1), "center": (1, 1),
           "east": (2, 1), "southwest": (0, 2), "south": (1, 2), "southeast": (2, 2)}


def _third(value: float) -> int:
    return 0 if value < 85 else 1 if value < 170 else 2


@pytest.mark.parametrize("gravity", COMPASS)
def test_compass_gravity_keeps_that_edge_or_corner(photo_jpeg: bytes, gravity: str) -> None:
    along_x, along_y = COMPASS[gravity]
    # The photo's red grows left to right and its green top to bottom (0 to 255 across it).
    narrow = load(transform(photo_jpeg, "jpeg", "png", w="300", h="600", gravity=gravity).body)
    assert (narrow.width, narrow.height) == (300, 600)
    assert _third(narrow[0].avg()) == along_x
    flat = load(transform(photo_jpeg, "jpeg", "png", w="600", h="100", gravity=gravity).body)
    assert (flat.width, flat.height) == (600, 100)
    assert _third(flat[1].avg()) == along_y


def test_fill_is_exactly_w_by_h_and_distorts(photo_jpeg: bytes) -> None:
    decoded = load(transform(photo_jpeg, "jpeg", "png", w="300", h="600", fit="fill").body)
    assert (decoded.width, decoded.height) == (300, 600)
    # The source's horizontal red gradient spans the full width: nothing was cropped away.
    assert decoded.crop(0, 0, 10, 600)[0].avg() < 20 and decoded.crop(290, 0, 10, 600)[0].avg() > 235


def test_cover_center_crops_the_middle(photo_jpeg: bytes) -> None:
    decoded = load(transform(photo_jpeg, "jpeg", "png", w="300", h="600").body)
    # Cover scale 600/1333: the image is 900 wide and the middle 300 are kept, so red stays mid-range.
    assert 60 < decoded[0].avg() < 190


def test_png_alpha_survives_webp_and_is_flattened_for_jpeg(alpha_png: bytes) -> None:
    webp = load(transform(alpha_png, "png", "webp", w="320").body)
    assert webp.hasalpha() and webp.bands == 4
    assert webp.crop(0, 0, 4, 4)[3].max() == 0             # corner still transparent
    jpeg = load(transform(alpha_png, "png", "jpeg", w="320").body)
    assert jpeg.bands == 3 and not jpeg.hasalpha()
    assert jpeg.crop(0, 0, 4, 4).min() > 240                 # transparent corner became white


@pytest.mark.parametrize("alpha", [False, True])
def test_grey_source_becomes_a_still_webp_in_rgb(alpha: bool) -> None:
    grey = pyvips.Image.xyz(400, 300)[0].cast("uchar").copy(interpretation="b-w")   # a left-to-right ramp
    if alpha:
        grey = grey.bandjoin((pyvips.Image.xyz(400, 300)[1] > 150).ifthenelse(255, 0).cast("uchar"))
    webp = load(transform(grey.pngsave_buffer(), "png", "webp", w="200").body)
    assert (webp.width, webp.height, webp.bands, webp.hasalpha()) == (200, 150, 4 if alpha else 3, alpha)
    left, right = webp.getpoint(10, 140), webp.getpoint(190, 140)
    assert left[0] == left[1] == left[2] < 40 and right[0] > 150   # grey stays grey, the ramp survives
    if alpha:
        assert webp.getpoint(100, 10)[3] == 0 and left[3] == 255


@pytest.mark.parametrize("fixture", ["animated_gif", "animated_webp"])
@pytest.mark.parametrize("output", ["webp", "gif"])
def test_animation_is_kept_where_the_format_can(request: pytest.FixtureRequest, fixture: str, output: str) -> None:
    source = request.getfixturevalue(fixture)
    fmt = fixture.split("_")[1]
    result = transform(source, fmt, output, w="150")
    decoded = load(result.body)
    assert decoded.get_n_pages() == FRAMES == result.pages
    assert (decoded.width, decoded.get_page_height()) == (150, 100)


@pytest.mark.parametrize("query", [{"w": "100", "h": "100"}, {"w": "100", "h": "100", "gravity": "auto"},
                                   {"w": "100", "h": "100", "blur": "4", "sharpen": "2"}])
def test_animated_cover_crops_every_frame(animated_gif: bytes, query: dict[str, str]) -> None:
    decoded = load(transform(animated_gif, "gif", "webp", **query).body)  # type: ignore[arg-type]  # all str
    assert decoded.get_n_pages() == FRAMES
    assert (decoded.width, decoded.get_page_height()) == (100, 100)
    # Each frame keeps its own colour: frames are cropped one by one, not as one strip.
    reds = [decoded.crop(0, i * 100 + 40, 100, 20)[0].avg() for i in range(FRAMES)]
    assert reds == sorted(reds) and reds[-1] - reds[0] > 150


@pytest.mark.parametrize("output", ["png", "jpeg", "avif"])
def test_animation_becomes_first_frame_where_the_format_cannot(animated_gif: bytes, output: str) -> None:
    result = transform(animated_gif, "gif", output, w="150")
    decoded = load(result.body)
    assert decoded.get_n_pages() == 1 and result.pages == 1
    assert (decoded.width, decoded.height) == (150, 100)
    assert decoded[0].avg() < 20          # the first frame's red is 0


def test_svg_is_rasterised_at_the_requested_size(logo_svg: bytes) -> None:
    decoded = load(transform(logo_svg, "svg", "png", w="1000").body)
    assert decoded.get("vips-loader") == "pngload_buffer"
    assert (decoded.width, decoded.height) == (1000, 500)


def test_hostile_svg_is_sanitised_before_rasterising(hostile_svg: bytes) -> None:
    source = read_source(hostile_svg, "svg")
    assert b"script" not in source.data and b"evil.example" not in source.data
    assert b"/etc/passwd" not in source.data and b"onload" not in source.data
    decoded = load(transform(hostile_svg, "svg", "png", w="240").body)
    assert (decoded.width, decoded.height) == (240, 160)


def test_svg_behind_a_raster_name_is_still_sanitised(hostile_svg: bytes) -> None:
    source = read_source(hostile_svg, "png")
    assert source.format == "svg" and b"script" not in source.data


def test_heic_source_is_decoded_with_pillow_heif(photo_jpeg: bytes) -> None:
    small = pyvips.Image.thumbnail_buffer(photo_jpeg, 600)
    heif = pillow_heif.from_bytes(mode="RGB", size=(small.width, small.height), data=small.write_to_memory())
    out = io.BytesIO()
    heif.save(out, quality=80)
    decoded = load(transform(out.getvalue(), "heic", "jpeg", w="300", h="300").body)
    assert (decoded.width, decoded.height) == (300, 300)


@pytest.mark.skipif("jxl" not in ENCODERS, reason="imagecodecs with libjxl is not installed")
def test_jxl_output(photo_jpeg: bytes) -> None:
    imagecodecs = pytest.importorskip("imagecodecs")
    result = transform(photo_jpeg, "jpeg", "jxl", w="400")
    assert result.content_type == "image/jxl"
    assert imagecodecs.jpegxl_decode(result.body).shape == (267, 400, 3)


def test_heic_output(photo_jpeg: bytes) -> None:
    result = transform(photo_jpeg, "jpeg", "heic", w="400")
    heif = pillow_heif.open_heif(result.body)
    assert heif.size == (400, 267) and result.content_type == "image/heic"


def test_quality_changes_size(photo_jpeg: bytes) -> None:
    low = transform(photo_jpeg, "jpeg", "jpeg", w="400", q="20").body
    high = transform(photo_jpeg, "jpeg", "jpeg", w="400", q="95").body
    assert len(low) < len(high)


def test_blur_smooths_and_sharpen_lifts_detail(photo_jpeg: bytes) -> None:
    plain = load(transform(photo_jpeg, "jpeg", "png", w="400").body)
    blurred = load(transform(photo_jpeg, "jpeg", "png", w="400", blur="20").body)
    sharpened = load(transform(photo_jpeg, "jpeg", "png", w="400", sharpen="10").body)
    # Edge energy: the mean absolute Laplacian of each result.
    laplacian = pyvips.Image.new_from_list([[0, -1, 0], [-1, 4, -1], [0, -1, 0]])

    def energy(image: pyvips.Image) -> float:
        return image.colourspace("b-w").conv(laplacian).abs().avg()

    assert energy(blurred) < energy(plain) / 2
    assert energy(sharpened) > energy(plain)


def test_face_gravity_centres_the_face(face_jpeg: bytes) -> None:
    # Cover 800x600 -> 300x600: scale 1, so the crop chooses which 300 columns survive.
    face = load(transform(face_jpeg, "jpeg", "png", w="300", h="600", gravity="face").body)
    center = load(transform(face_jpeg, "jpeg", "png", w="300", h="600", gravity="center").body)
    skin = (220, 180, 150)

    def is_skin(image: pyvips.Image, x: int, y: int) -> bool:
        return all(abs(a - b) < 25 for a, b in zip(image(x, y)[:3], skin, strict=True))

    face_x = FACE_CENTER[0] - (800 - 300)    # the face is near the right edge: crop clamps there
    assert is_skin(face, face_x, FACE_CENTER[1] + 60)
    assert not any(is_skin(center, x, FACE_CENTER[1] + 60) for x in range(0, 300, 10))


def test_face_gravity_falls_back_to_attention_without_faces(photo_jpeg: bytes) -> None:
    face = transform(photo_jpeg, "jpeg", "png", w="300", h="300", gravity="face").body
    attention = transform(photo_jpeg, "jpeg", "png", w="300", h="300", gravity="auto").body
    assert face == attention


def test_decompression_bomb_is_refused_from_the_header(bomb_png: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_decode(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the pipeline decoded pixels of an image over the pixel budget")

    monkeypatch.setattr(steps, "STEPS", (("decode", no_decode),))
    monkeypatch.setattr(pyvips.Image, "thumbnail_buffer", no_decode)
    with pytest.raises(LegacyError) as caught:
        transform(bomb_png, "png", "webp", w="100")
    assert caught.value.status == 422
    assert "30000x30000" in caught.value.error and "900,000,000 pixels" in caught.value.error


def test_animation_frames_count_towards_the_pixel_budget(animated_gif: bytes) -> None:
    transform(animated_gif, "gif", "png", max_pixels=300 * 200)            # one frame fits
    with pytest.raises(LegacyError) as caught:
        transform(animated_gif, "gif", "webp", max_pixels=300 * 200)       # four do not
    assert caught.value.status == 422 and "4 frames" in caught.value.error


def test_animations_over_the_frame_or_pixel_bound_are_refused_before_decoding(
        animated_gif: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    transform(animated_gif, "gif", "gif", w="30", limits={"max_animation_frames": FRAMES})
    monkeypatch.setattr(steps, "STEPS", ())           # nothing may be decoded past the header
    for limits in ({"max_animation_frames": FRAMES - 1}, {"max_animation_pixels": 300 * 200 * FRAMES - 1}):
        with pytest.raises(LegacyError) as caught:
            transform(animated_gif, "gif", "webp", w="30", limits=limits)
        assert caught.value.status == 422 and f"{FRAMES} frames of 300x200" in caught.value.error
        assert "format=png" in caught.value.error


def test_an_animation_over_the_bounds_still_gives_its_first_frame(animated_gif: bytes) -> None:
    result = transform(animated_gif, "gif", "png", w="30", limits={"max_animation_frames": 1})
    assert result.pages == 1 and load(result.body).width == 30


def test_svg_filter_work_is_bounded_by_the_rasterised_size() -> None:
    svg = (b'<svg xmlns="http://www.w3.org/2000/svg" width="3000" height="3000"><filter id="f">'
           b'<feGaussianBlur stdDeviation="400"/></filter><rect width="3000" height="3000" fill="red" '
           b'filter="url(#f)"/></svg>')
    with pytest.raises(LegacyError) as caught:
        transform(svg, "svg", "png", limits={"max_svg_filter_pixels": 8_000_000})   # 9 MP x 1 primitive
    assert caught.value.status == 422 and "filter effects (1 primitives) over 3000x3000" in caught.value.error
    small = load(transform(svg, "svg", "png", w="200", limits={"max_svg_filter_pixels": 8_000_000}).body)
    assert (small.width, small.height) == (200, 200)
    with pytest.raises(LegacyError):
        transform(svg, "svg", "png", w="200", limits={"max_svg_filter_pixels": 200 * 200 - 1})


def test_requested_output_over_the_budget_is_refused(photo_jpeg: bytes) -> None:
    with pytest.raises(LegacyError) as caught:
        transform(photo_jpeg, "jpeg", "webp", w="8192", h="8192")
    assert caught.value.status == 422 and "requested output" in caught.value.error


@pytest.mark.parametrize(("size", "output", "words"), [
    ((16384, 4), "webp", "WebP holds at most 16383 pixels a side"),
    ((4, 16384), "webp", "WebP holds at most 16383 pixels a side"),
    ((16385, 4), "avif", "AVIF holds at most 16384 pixels a side"),
    ((8192, 8), "heic", "could not be written as heic"),
    ((65536, 2), "jpeg", "JPEG holds at most 65535 pixels a side"),
    ((2, 65536), "gif", "GIF holds at most 65535 pixels a side"),
])
def test_an_output_larger_than_its_format_holds_is_refused_as_the_requests_not_an_internal_error(
        size: tuple[int, int], output: str, words: str) -> None:
    """A panorama within the pixel budget, asked for as WebP (as `format=auto` and `/api/auto` choose for every
    browser): libwebp refuses a side over 16383 pixels, and its ValueError, like pillow-heif's RuntimeError, was the
    image worker's crash (500 "internal error", logged with its traceback) where it is a 422 the request can
    change (a smaller w or h, another format), and the one `/api/auto` moves on to the next format after."""
    wide = pyvips.Image.black(*size).new_from_image([200, 30, 30]).copy(interpretation="srgb").cast("uchar")
    with pytest.raises(LegacyError) as caught:
        transform(wide.pngsave_buffer(), "png", output)
    assert caught.value.status == 422 and words in caught.value.error, caught.value.error
    if output != "heic":
        side = "w" if size[0] > size[1] else "h"
        smaller = transform(wide.pngsave_buffer(), "png", output, w="2000") if side == "w" else \
            transform(wide.pngsave_buffer(), "png", output, h="2000")
        assert max(smaller.width, smaller.height) == 2000


def test_time_budget_is_checked_between_steps(photo_jpeg: bytes) -> None:
    with pytest.raises(LegacyError) as caught:
        transform(photo_jpeg, "jpeg", "webp", w="400", budget=0.0)
    assert caught.value.status == 503 and "time budget" in caught.value.error


def test_time_budget_stops_a_long_encode(photo_jpeg: bytes) -> None:
    # A radius-250 blur of the full 2000x1333 image takes seconds; the budget is a tenth of one.
    with pytest.raises(LegacyError) as caught:
        transform(photo_jpeg, "jpeg", "png", blur="250", budget=0.1)
    assert caught.value.status == 503


def test_a_libvips_error_once_the_deadline_has_passed_is_the_budgets_503(
        photo_jpeg: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    # What a loaded machine does to a kill: libvips reports it as a plain failure of some step.
    def overrun_then_fail(_ctx: object) -> None:
        spent = time.process_time() + 0.2
        while time.process_time() < spent:   # the budget counts CPU time: spend it
            pass
        raise pyvips.Error("unable to call pngsave_buffer")

    monkeypatch.setattr(steps, "STEPS", (("decode", decode), ("blur", overrun_then_fail)))
    with pytest.raises(LegacyError) as caught:
        transform(photo_jpeg, "jpeg", "png", w="100", budget=0.1)
    assert caught.value.status == 503 and "time budget of 0.1 s (during 'blur')" in caught.value.error


def test_a_step_held_off_the_cores_past_the_budget_is_not_over_it(
        photo_jpeg: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    # The budget is the input's cost in CPU time, not the wall time a loaded machine makes it wait.
    def wait_then_blur(ctx: TransformContext) -> None:
        time.sleep(0.5)
        ctx.image = ctx.require_image().gaussblur(1)

    monkeypatch.setattr(steps, "STEPS", (("decode", decode), ("blur", wait_then_blur), ("encode", steps.encode)))
    result = transform(photo_jpeg, "jpeg", "png", w="100", budget=0.25)
    assert result.content_type == "image/png" and result.body.startswith(b"\x89PNG")


@pytest.mark.parametrize("data", [b"\xff\xd8\xff\xe0 truncated jpeg", b"GIF89a nonsense", b"a,b\n1,2\n", b""])
def test_corrupt_or_unknown_sources_are_4xx(data: bytes) -> None:
    with pytest.raises(LegacyError) as caught:
        transform(data, "jpeg", "webp", w="100")
    assert caught.value.status in (415, 422)


def test_unknown_output_format_is_refused(photo_jpeg: bytes) -> None:
    with pytest.raises(LegacyError) as caught:
        transform(photo_jpeg, "jpeg", "bmp", w="100")
    assert caught.value.status == 400


def test_transforms_run_concurrently_in_threads(photo_jpeg: bytes, face_jpeg: bytes) -> None:
    jobs = [(photo_jpeg, {"w": "200", "h": "200", "gravity": "face"}), (face_jpeg, {"w": "300", "h": "600", "gravity": "face"})] * 4
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda job: transform(job[0], "jpeg", "webp", **job[1]), jobs))
    assert [(r.width, r.height) for r in results] == [(200, 200), (300, 600)] * 4


def test_huge_svg_canvas_is_rendered_at_the_target_size_only() -> None:
    svg = (b'<svg xmlns="http://www.w3.org/2000/svg" width="100000" height="50000">'
           b'<rect width="100000" height="50000" fill="red"/></svg>')
    decoded = load(transform(svg, "svg", "png", w="200").body)
    assert (decoded.width, decoded.height) == (200, 100)
    with pytest.raises(LegacyError) as caught:
        transform(svg, "svg", "png")                    # no target: the full canvas would be drawn
    assert caught.value.status == 422


@pytest.mark.parametrize("kind", ["grey", "grey_alpha", "rgb16", "cmyk"])
@pytest.mark.parametrize("output", ["jpeg", "webp", "png"])
def test_unusual_colour_sources_come_out_as_8_bit(photo_jpeg: bytes, kind: str, output: str) -> None:
    base = pyvips.Image.thumbnail_buffer(photo_jpeg, 500)
    if kind == "grey":
        data, fmt = base.colourspace("b-w").pngsave_buffer(), "png"
    elif kind == "grey_alpha":
        data, fmt = base.colourspace("b-w").bandjoin(200).pngsave_buffer(), "png"
    elif kind == "rgb16":
        data, fmt = base.colourspace("rgb16").pngsave_buffer(), "png"
    else:
        data, fmt = base.icc_export(output_profile="cmyk").jpegsave_buffer(), "jpeg"
    decoded = load(transform(data, fmt, output, w="100", sharpen="2").body)
    assert decoded.width == 100 and decoded.format == "uchar"


def test_face_gravity_finds_a_real_face_on_a_plain_background() -> None:
    # The astronaut's head near the right edge of a mostly plain picture, with a saturated block on
    # the left that saliency prefers: the old histogram-equalising cascade missed such faces and
    # fell back to saliency, so the crop showed the block instead of the face.
    import numpy as np
    import skimage.data

    head = pyvips.Image.new_from_array(np.ascontiguousarray(skimage.data.astronaut()[40:200, 150:300]))
    canvas = pyvips.Image.black(900, 600, bands=3).new_from_image([235] * 3).copy(interpretation="srgb")
    block = (pyvips.Image.black(200, 200, bands=3) + [255, 0, 0]).cast("uchar").copy(interpretation="srgb")
    frame = canvas.insert(block, 40, 300).insert(head.copy(interpretation="srgb"), 650, 40)
    picture = frame.cast("uchar").jpegsave_buffer(Q=90)
    auto = load(transform(picture, "jpeg", "png", w="300", h="600", gravity="auto").body)
    assert auto(140, 400)[1] < 60                      # saliency keeps the red block
    cropped = load(transform(picture, "jpeg", "png", w="300", h="600", gravity="face").body)
    # The rightmost 300 columns (600..900): the head at x 50..200 of the crop, no red block.
    assert cropped.extract_area(50, 40, 150, 160).deviate() > 20
    assert cropped(140, 400)[1] > 200


def test_a_cover_over_the_pixel_budget_names_the_size_it_scales_to_not_the_output_asked_for() -> None:
    """fit=cover first scales the picture to cover w x h, then cuts w x h out of that: the budget holds the covering
    size (gravity=face keeps it in memory), and the refusal says so rather than calling 100x10000 the output a client
    asked 100x100 of; fit=outside's covering size is its output."""
    strip = pyvips.Image.black(10, 1000).new_from_image([200, 30, 30]).copy(interpretation="srgb").cast("uchar")
    source = strip.pngsave_buffer()
    with pytest.raises(LegacyError) as caught:
        transform(source, "png", "png", max_pixels=500_000, w="100", h="100")
    assert caught.value.status == 422
    assert caught.value.error.startswith("The size fit=cover scales to before its 100x100 crop is too large: "
                                         "100x10000 = 1,000,000 pixels"), caught.value.error
    with pytest.raises(LegacyError) as outside:
        transform(source, "png", "png", max_pixels=500_000, w="100", h="100", fit="outside")
    assert outside.value.error.startswith("The requested output is too large: 100x10000"), outside.value.error
    assert load(transform(source, "png", "png", max_pixels=1_000_000, w="100", h="100").body).width == 100
