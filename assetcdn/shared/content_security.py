"""Stored files never run with the service's authority: the headers that keep browsers from
executing what tenants upload on the origin that also serves `/api`.

- ``X-Content-Type-Options: nosniff`` goes on every response of both processes
  (assetcdn/shared/middleware.py): a browser never guesses an executable type for a body we label
  otherwise (an SVG uploaded as ``.png``, an HTML page as ``.txt``).
- Responses of an *active* type (one a browser renders as a document that can run script:
  HTML, XHTML, SVG, any XML, XSLT, JavaScript) carry :data:`SANDBOX_CSP`. ``sandbox`` gives the
  document an opaque origin with scripts, forms, popups and plugins disabled, so it can read no
  cookie, storage or same-origin API response; ``default-src 'none'`` forbids every network
  load. What a static document still needs is allowed inline only: ``style-src
  'unsafe-inline'`` (SVG presentation styles, ``<style>`` blocks), ``img-src data:`` and
  ``font-src data:`` (embedded rasters and fonts). That is exactly what the same SVG may do
  inside an ``<img>`` on a customer's page, so opening a file on its own never does more than
  embedding it does. Pages that want linked stylesheets or images must inline them.
- Passive types (raster images, video, audio, fonts, CSS, JSON, plain text, PDF) get no CSP: a
  ``default-src 'none'`` would stop a browser's own media viewer from loading the file it shows,
  and with ``nosniff`` none of them is ever executed. PDF is rendered by the browser's own
  viewer, which gets no access to the origin's cookies or DOM.

The policy is applied by the edge's path delivery (assetcdn/edge/states/path_delivery.py), again after the
operator's ``_headers`` rules (assetcdn/edge/site_config.py: a rule may add a stricter policy, never remove
or replace ours), and as a safety net on every response of both processes that has an active
type and sets no policy of its own (storage downloads through ``/api/storage``).
"""

from __future__ import annotations

from collections.abc import MutableMapping
from functools import lru_cache

from multidict import CIMultiDict

NOSNIFF_HEADER = "X-Content-Type-Options"
NOSNIFF = "nosniff"
CSP_HEADER = "Content-Security-Policy"
SANDBOX_CSP = "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src data:; font-src data:"

# Media types a browser renders as a scriptable document or runs as script (beyond `*+xml`).
ACTIVE_MEDIA_TYPES = frozenset({
    "text/html", "application/xhtml+xml", "image/svg+xml", "text/xml", "application/xml",
    "text/xsl", "application/xslt+xml", "text/javascript", "application/javascript",
    "application/x-javascript", "application/ecmascript", "text/ecmascript", "text/jscript",
    "application/x-ecmascript", "text/x-javascript", "text/livescript", "multipart/x-mixed-replace",
})


def media_type(content_type: str) -> str:
    """``text/html; charset=utf-8`` -> ``text/html``."""
    return content_type.split(";", 1)[0].strip().lower()


@lru_cache(maxsize=256)
def is_active(content_type: str | None) -> bool:
    """Whether a browser would run script in (or from) a body of this type."""
    if not content_type:
        return False
    if "," in content_type:  # a list (`image/png, text/html`): browsers take its last type (Fetch's "extract a MIME
        # type"), so it is active when any member is
        return any(is_active(member) for member in content_type.split(",") if member.strip())
    kind = media_type(content_type)
    return kind in ACTIVE_MEDIA_TYPES or kind.endswith("+xml")


@lru_cache(maxsize=256)
def security_headers(content_type: str | None) -> tuple[tuple[str, str], ...]:
    """The protective headers of a stored file served with ``content_type``."""
    if is_active(content_type):
        return ((NOSNIFF_HEADER, NOSNIFF), (CSP_HEADER, SANDBOX_CSP))
    return ((NOSNIFF_HEADER, NOSNIFF),)


def protect(headers: MutableMapping[str, str]) -> None:
    """Stamp ``nosniff`` and, on an active type that carries no policy of its own, the sandbox.

    Run on every response as it is prepared (assetcdn/shared/middleware.py); idempotent and cheap: a
    set lookup per response once the content type has been seen.
    """
    headers[NOSNIFF_HEADER] = NOSNIFF
    if CSP_HEADER not in headers and is_active(headers.get("Content-Type")):
        headers[CSP_HEADER] = SANDBOX_CSP


def keep_sandbox(headers: CIMultiDict[str]) -> None:
    """After headers were changed by someone else's rules: nosniff, and the sandbox among the
    policies whenever the (possibly new) type is active. Another policy may stay beside it: a
    browser enforces each one, so extra policies only tighten."""
    headers[NOSNIFF_HEADER] = NOSNIFF
    if is_active(headers.get("Content-Type")) and SANDBOX_CSP not in headers.getall(CSP_HEADER, ()):
        headers.add(CSP_HEADER, SANDBOX_CSP)
