"""Passkeys (WebAuthn): the stored credentials and their challenges (`store`), and the registration
and sign-in ceremonies (`ceremony`)."""
