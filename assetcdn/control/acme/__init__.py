"""Certificates from an ACME CA (RFC 8555) for custom domains and the public host, handed to every edge."""
