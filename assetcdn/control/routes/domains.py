"""Core plane: custom domains of a zone (AccountKey).

POST /api/core/zones/{id}/domains {Hostname} -> 201; GET lists them (or one, ``/domains/{hostname}``); DELETE
removes one, named by ``/domains/{hostname}`` or ``/domains?hostname=``. The domain map reaches every edge
through the edge config (``publish_config``); an edge then serves the zone's files on that hostname. Every
zone is also served on ``<zone>.<base domain>`` without a domain record, so names under the base
domain are refused here, as are the CDN's own hosts (``own_hosts``): a zone holding one of them would take
over its certificate record and its files on every edge.

A new name is ordered a certificate at once and a removed one loses it (assetcdn/control/acme/issuer.py);
each answer shows the certificate's state: SslStatus (provisioning, active, failed), SslExpiresAt, and the
CA's reason with the next attempt (SslError, SslRetryAt) after a failure.
"""

from __future__ import annotations

import ipaddress
import re
import sqlite3
from typing import Any

from aiohttp import web

from assetcdn.control.acme.service import CERTIFICATES
from assetcdn.control.acme.store import CertificateRecord
from assetcdn.control.app_keys import DASHBOARD, SETTINGS
from assetcdn.control.publishing.service import PUBLISHER, REGISTRY
from assetcdn.control.request_body import read_json
from assetcdn.control.storage.edge_config_store import (
    Domain,
    DomainLimitReached,
    own_hosts,
    url_host,
)
from assetcdn.control.storage.service import EDGE_CONFIG
from assetcdn.shared.errors import ApiError, bad_request, conflict, not_found
from assetcdn.shared.middleware import json_response
from assetcdn.shared.timestamps import as_iso_utc, utc_now_iso

from .zones import require_zone, zone_names

MAX_HOSTNAME_LENGTH = 253
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")  # used with fullmatch
# Special-use names (RFC 6761, RFC 6762, ICANN's .internal) that can never point at this CDN.
RESERVED_SUFFIXES = ("localhost", "local", "internal", "invalid", "onion", "arpa")


def normalise_hostname(value: Any) -> str:
    """Lower case, without surrounding spaces and the trailing dot of an absolute name.

    Only spaces are trimmed: a newline, tab or other control character stays and ``hostname_problem``
    refuses it. Only ASCII is lower-cased (``str.lower`` maps the Kelvin sign to 'k')."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise bad_request("Missing required field: Hostname (a fully qualified domain name, e.g. cdn.example.com).",
                          target="Hostname", code="MissingHostname")
    if not isinstance(value, str):  # a hostname sent, of another type: invalid, not missing
        raise bad_request("'Hostname' must be a string: a fully qualified domain name, e.g. cdn.example.com.",
                          target="Hostname", code="InvalidHostname")
    hostname = value.strip(" ")
    return (hostname.lower() if hostname.isascii() else hostname).removesuffix(".")


def hostname_problem(hostname: str, base_domain: str) -> str | None:
    """Why ``hostname`` (normalised) cannot be a custom domain, or None."""
    try:
        ipaddress.ip_address(hostname.strip("[]"))
        return f"'{hostname}' is an IP address; a custom domain must be a hostname with a CNAME record."
    except ValueError:
        pass
    if len(hostname) > MAX_HOSTNAME_LENGTH:
        return f"A hostname is at most {MAX_HOSTNAME_LENGTH} characters."
    labels = hostname.split(".")
    if len(labels) < 2:
        return f"'{hostname}' is not a fully qualified domain name (it needs at least two labels, e.g. cdn.example.com)."
    for label in labels:
        if not _LABEL.fullmatch(label):
            return (f"'{label}' is not a valid hostname label: 1-63 characters of a-z, 0-9 and '-', "
                    "not starting or ending with '-'.")
    if labels[-1].isdigit():
        return f"The top-level domain of '{hostname}' cannot be all digits."
    if any(hostname == s or hostname.endswith("." + s) for s in RESERVED_SUFFIXES):
        return f"'{hostname}' is a reserved special-use name and cannot be served publicly."
    base = base_domain.strip(".").lower()
    if base and (hostname == base or hostname.endswith("." + base)):
        return (f"'{hostname}' is under the CDN's base domain '{base}'; every zone is already served on "
                f"<zone>.{base}.")
    return None


def _reserved_hosts(request: web.Request) -> dict[str, str]:
    """`own_hosts`, and the host of every edge registered now (the URL it announced)."""
    hosts = own_hosts(request.app[SETTINGS], request.app[DASHBOARD].origins)
    for edge in request.app[REGISTRY].edges.values():
        hosts.setdefault(url_host(edge.url), f"the edge {edge.name}")
    hosts.pop("", None)
    return hosts


def _domain_json(domain: Domain, record: CertificateRecord | None) -> dict[str, Any]:
    return {"Zone": domain.zone, "Hostname": domain.hostname,
            "SslStatus": record.status if record is not None else domain.ssl_status,
            "SslExpiresAt": record.expires_iso if record is not None else None,
            "SslError": record.error if record is not None else None,
            "SslRetryAt": record.retry_iso if record is not None else None,
            "DateCreated": as_iso_utc(domain.created_at)}


async def add_domain(request: web.Request) -> web.Response:
    zone = await require_zone(request)
    body = await read_json(request)
    if not isinstance(body, dict):
        raise bad_request('The body must be a JSON object: {"Hostname": "cdn.example.com"}.', code="InvalidBody")
    hostname = normalise_hostname(body.get("Hostname", body.get("hostname")))
    settings = request.app[SETTINGS]
    problem = hostname_problem(hostname, settings.get("domains", "base_domain"))
    if problem:
        raise bad_request(problem, target="Hostname", code="InvalidHostname")
    if (owner := _reserved_hosts(request).get(hostname)) is not None:
        raise bad_request(f"'{hostname}' is a host of this CDN itself ({owner}); a zone cannot take it over.",
                          target="Hostname", code="InvalidHostname")
    config = request.app[EDGE_CONFIG]
    # Under the lock a zone's deletion takes before it removes the zone's domains (zones.py `delete_zone`), with
    # the zone checked again: it may have been deleted while the body came, and a domain of a zone that is gone
    # could be neither removed (404 ZoneNotFound) nor added to another zone (409 DomainExists).
    async with config.origin_changes:
        zone = await require_zone(request)
        existing = await config.domain(hostname)
        if existing is not None and existing.zone not in await zone_names(request):
            # Left behind by a deletion stopped before it removed its zone's domains (control killed): free.
            await config.remove_domain(hostname)
            existing = None
        if existing is not None:
            where = "this zone" if existing.zone == zone else "another zone"
            raise conflict(f"'{hostname}' is already in use by {where}. Remove it there first.",
                           target="Hostname", code="DomainExists")
        try:
            domain = await config.add_domain(hostname, zone, max_per_zone=settings.get("domains", "max_per_zone"),
                                              max_total=settings.get("domains", "max_total"))
        except sqlite3.IntegrityError:  # a concurrent add of the same name won
            raise conflict(f"'{hostname}' is already in use.", target="Hostname", code="DomainExists") from None
        except DomainLimitReached as limit:
            where = f"zone '{zone}'" if limit.scope == "zone" else "this installation"
            setting = "domains.max_per_zone" if limit.scope == "zone" else "domains.max_total"
            raise ApiError(400, "TooManyDomains", f"Maximum {limit.limit} custom domains in {where} ({setting}). "
                           "Remove one first.", target="Hostname") from None
        await request.app[PUBLISHER].publish_config()
    issuer = request.app[CERTIFICATES]
    await issuer.reconcile()  # its certificate is ordered now
    target = settings.get("domains", "cname_target")
    certificate = ("SSL certificate will be provisioned automatically once the record resolves."
                   if issuer.authority is not None else
                   "Certificates are not ordered here ([acme] directory_url is not set): serve it with your own.")
    return json_response({
        "HttpCode": 201, "Message": f"Custom domain '{hostname}' added successfully",
        **_domain_json(domain, await issuer.record(hostname)),
        "Note": f"Create a CNAME record {hostname} -> {target}. {certificate}",
    }, status=201)


async def list_domains(request: web.Request) -> web.Response:
    zone = await require_zone(request)
    domains = await request.app[EDGE_CONFIG].domains(zone)
    records = await request.app[CERTIFICATES].store.records()
    target = request.app[SETTINGS].get("domains", "cname_target")
    return json_response({
        "Zone": zone, "CnameTarget": target,
        "Domains": [_domain_json(d, records.get(d.hostname)) for d in domains],
        "Count": len(domains), "DateFetched": utc_now_iso(),
    })


async def _zone_domain(request: web.Request, zone: str) -> Domain:
    raw = request.match_info.get("hostname") or request.query.get("hostname")
    if not raw or not raw.strip():
        raise bad_request("Missing the hostname: /api/core/zones/{id}/domains/{hostname} (or ?hostname=).",
                          target="hostname", code="MissingHostname")
    hostname = normalise_hostname(raw)
    domain = await request.app[EDGE_CONFIG].domain(hostname)
    if domain is None or domain.zone != zone:
        raise not_found(f"'{hostname}' is not a custom domain of zone '{zone}'.", target="hostname",
                        code="DomainNotFound")
    return domain


async def get_domain(request: web.Request) -> web.Response:
    zone = await require_zone(request)
    domain = await _zone_domain(request, zone)
    target = request.app[SETTINGS].get("domains", "cname_target")
    return json_response({**_domain_json(domain, await request.app[CERTIFICATES].record(domain.hostname)),
                          "CnameTarget": target, "DateFetched": utc_now_iso()})


async def remove_domain(request: web.Request) -> web.Response:
    zone = await require_zone(request)
    domain = await _zone_domain(request, zone)
    await request.app[EDGE_CONFIG].remove_domain(domain.hostname)
    await request.app[PUBLISHER].publish_config()
    await request.app[CERTIFICATES].reconcile()  # its certificate stops being offered, its key is deleted
    return json_response({"HttpCode": 200, "Message": f"Custom domain '{domain.hostname}' removed.", "Zone": zone,
                          "Hostname": domain.hostname})
