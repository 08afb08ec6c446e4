"""The edge's hit path: cache hits answered below aiohttp, everything else handed to the application.

- protocol.py: the public connections (httptools on a bare asyncio.Protocol), pipelining, deadlines,
  hand-over of single requests or whole connections to aiohttp's request handlers;
- hit_server.py: per-worker state of those connections and the hit itself (HitServer), the listening
  site (HitSite, in place of aiohttp's TCPSite; ProxiedTCPSite, aiohttp's own behind a PROXY header);
- prepared.py: response heads prepared once per (Host, path) and what makes them stale;
- sendfile.py: bodies sent from the disk tier's file with sendfile(2);
- proxy_protocol.py: a load balancer's PROXY protocol header, read before HTTP (or TLS) when configured.
"""
