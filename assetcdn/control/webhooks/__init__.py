"""Webhooks: registrations, the durable event outbox, and the worker that delivers events.

A mutation's events are recorded in SQLite in the same transaction as its manifest generation
(``outbox``); commits whose events a killed process did not record are found again at start from
git itself. The worker (``worker``) fans each event out to the webhooks subscribed to it and posts
it, signed, through a sender that refuses private addresses (``sender``, with the checks of assetcdn/shared/address_guard.py).
"""
