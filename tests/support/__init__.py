"""Helpers tests in several folders share: servers they start (ACME test CA, Redis) and their set-up."""
