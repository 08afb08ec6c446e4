"""Demo content for a first start into an empty data directory: one zone with real images made by pyvips
(an SVG logo, its PNG/WebP/AVIF variants, a photo-like JPEG banner), committed in one commit."""

from __future__ import annotations

import pyvips

from assetcdn.control.publishing.publisher import Publisher
from assetcdn.control.storage.zones_store import ZoneStore
from assetcdn.shared.paths import CLIENT_ROOT, ZONE_CATEGORIES

DEMO_ZONE = "demo"

LOGO_SVG = b"""<svg xmlns="http://www.w3.org/2000/svg" width="512" height="512" viewBox="0 0 512 512">
  <defs><linearGradient id="g" x1="0" y1="0" x2="1" y2="1">
    <stop offset="0" stop-color="#ff7a18"/><stop offset="1" stop-color="#af002d"/></linearGradient></defs>
  <rect width="512" height="512" rx="96" fill="url(#g)"/>
  <circle cx="256" cy="230" r="120" fill="none" stroke="#fff" stroke-width="36"/>
  <path d="M136 400 L376 400" stroke="#fff" stroke-width="36" stroke-linecap="round"/>
</svg>
"""


def _banner_jpeg(width: int = 1600, height: int = 600) -> bytes:
    """A photo-like banner: a sky gradient, a noisy 'landscape' and soft light, so it compresses like a photo."""
    x = pyvips.Image.xyz(width, height)
    xs = x[0] / width
    ys = x[1] / height
    sky = (ys * -120 + 210).cast("uchar")
    red = (xs * 60 + ys * 80 + 40)
    green = (ys * 60 + 90 - xs * 20)
    noise = pyvips.Image.gaussnoise(width, height, sigma=18, mean=0)
    ridge = ((xs * 12).sin() * 0.08 + 0.6) * height
    ground = (x[1] > ridge).ifthenelse(1, 0)
    r = ground.ifthenelse(red * 0.6 + noise, red + 60)
    g = ground.ifthenelse(green + 40 + noise, green + 90)
    b = ground.ifthenelse(noise + 50, sky)
    image = r.bandjoin([g, b]).cast("uchar").copy(interpretation="srgb")
    return image.jpegsave_buffer(Q=82, optimize_coding=True, keep="none")


def demo_files() -> dict[str, bytes]:
    base = f"{CLIENT_ROOT}/{DEMO_ZONE}/v1"
    logo = pyvips.Image.svgload_buffer(LOGO_SVG)
    files = {f"{base}/{category}/.gitkeep": b"" for category in ZONE_CATEGORIES}
    files |= {
        f"{base}/logos/logo.svg": LOGO_SVG,
        f"{base}/logos/logo.png": logo.pngsave_buffer(compression=9),
        f"{base}/logos/logo.webp": logo.webpsave_buffer(Q=85),
        f"{base}/logos/logo.avif": logo.heifsave_buffer(compression="av1", Q=60, effort=2),
        f"{base}/icons/icon-192x192.png": logo.thumbnail_image(192).pngsave_buffer(),
        f"{base}/banners/banner.jpg": _banner_jpeg(),
    }
    return files


async def install_demo(publisher: Publisher, zones: ZoneStore) -> None:
    """Commit the demo zone in one commit (only called on a first start into an empty repository)."""
    published = await publisher.commit(demo_files(), f"Install demo zone '{DEMO_ZONE}' with sample images")
    await zones.ensure(DEMO_ZONE, published.commit.committed_at)
