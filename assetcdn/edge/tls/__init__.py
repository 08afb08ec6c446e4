"""HTTPS at the edge: TLS terminated by the edge itself, on its own port beside the plain one.

- state.py: the TLS state control hands to this worker (ACME answers, certificates with sealed keys),
  applied whole, kept in memory with the keys unsealed, persisted (keys still sealed) in the cache dir;
- certificates.py: every certificate this worker offers (operator files, the TLS state, a self-signed
  default), one ``ssl.SSLContext`` per name picked by SNI, swapped in place when they change;
- tickets.py: session ticket keys shared by the edge's workers, rotated (OpenSSL's ticket key, through cffi);
- site.py: the https listener (the hit path's site with TLS), ALPN choosing HTTP/1.1 or HTTP/2;
- h2.py: HTTP/2 connections (libnghttp2 through ``ngh2``): hits answered from the stream's fields by the hit
  path's decisions, every other stream as the HTTP/1.1 path answers it;
- policy.py: redirect of plain HTTP to https, HSTS, and the ACME challenge answers.
"""
