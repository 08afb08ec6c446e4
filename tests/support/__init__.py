"""Helpers tests in several folders share, so that no test imports from a conftest.py or another test module:
the in-process control plane and its secrets (control.py), control and edge in one loop (cdn.py, hit_cdn.py),
scripted origins (origins.py), the https test CDN (https.py), images, waits and sockets, and servers tests
start (ACME test CA, Redis) with their set-up. Fixtures stay in the conftest.py files, which call these.
`rewrite_imports.py` rewrites imports of a helper's old home."""
