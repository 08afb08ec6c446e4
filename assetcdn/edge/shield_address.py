"""``[origin] shield`` as configured, checked without the shield's own machinery (assetcdn/edge/shield.py): an
edge started with several workers checks it before it starts any, in a process that serves nothing."""

from __future__ import annotations

from yarl import URL

OFF = "off"


def shield_setting(raw: object) -> str:
    """``[origin] shield`` checked: "", "off", or an edge worker's cluster address (``http(s)://host:port``,
    returned without a trailing slash); ValueError for anything else (the edge does not start)."""
    value = str(raw).strip()
    if value in ("", OFF):
        return value
    try:
        url = URL(value)
    except ValueError:
        url = None
    if url is None or url.scheme not in ("http", "https") or not url.host or url.raw_path.strip("/") \
            or url.query_string or url.fragment or url.user is not None or url.password is not None \
            or url.port == 0 or any(c.isspace() or c in "?#" for c in value):
        raise ValueError(f'[origin] shield must be "", "off" or an edge\'s cluster address such as '
                         f'"http://10.0.0.21:9788", not {value!r}')
    return value.rstrip("/")
