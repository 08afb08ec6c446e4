"""The ACME CA as control talks to it, through certbot's protocol library (`acme`): one account per
installation, one HTTP-01 order per name, and the CA's own words when it refuses.

The library is blocking (requests), so every call runs on a small thread pool of its own: a validation
being polled never holds a thread the rest of control needs. The account key (ECDSA P-256) is made once
into ``<data dir>/acme/account.key`` (0600); the account itself is looked up by that key on first use.
"""

from __future__ import annotations

import asyncio
import datetime
import email.utils
import functools
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import josepy as jose
import requests
from acme import challenges, crypto_util, errors, messages
from acme.client import ClientNetwork, ClientV2
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from assetcdn.control.acme.orders import OrderFailed, write_private
from assetcdn.control.acme.settings import AcmeSettings

log = logging.getLogger(__name__)

ACCOUNT_KEY_FILE = "account.key"
CA_BUNDLE_FILE = "ca-bundle.pem"  # the public roots plus acme.ca_bundle, made at start
NETWORK_TIMEOUT_S = 15
USER_AGENT = "assetcdn-acme (acme-python)"
RATE_LIMITED = "rateLimited"
# The CA no longer knows the account (a reset test CA, a deactivated account): register again.
ACCOUNT_GONE = "accountDoesNotExist"

T = TypeVar("T")
# Publishes {token: key authorization} to the edges and returns once they can answer (or the wait ran out).
ChallengePublisher = Callable[[dict[str, str]], Awaitable[None]]


@dataclass(frozen=True)
class Issued:
    key_pem: bytes
    chain_pem: str


def new_private_key_pem() -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def load_account_key(acme_dir: Path) -> jose.JWKEC:
    """The installation's account key, made on first use. An unreadable file is an error naming it."""
    path = acme_dir / ACCOUNT_KEY_FILE
    if not path.exists():
        write_private(path, new_private_key_pem())
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError) as exc:
        raise RuntimeError(f"the ACME account key {path} cannot be read ({type(exc).__name__}); "
                           "remove it to register a new account") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise RuntimeError(f"the ACME account key {path} is not an ECDSA key")
    return jose.JWKEC(key=key)


def trust_bundle(settings: AcmeSettings, acme_dir: Path) -> str | bool:
    """What requests verifies the CA with: the public roots, plus acme.ca_bundle when one is set."""
    if not settings.ca_bundle:
        return True
    extra = Path(settings.ca_bundle)
    try:
        extra_pem = extra.read_text()
    except OSError as exc:
        raise RuntimeError(f"acme.ca_bundle {extra} cannot be read: {exc.strerror or exc}") from None
    if "-----BEGIN CERTIFICATE-----" not in extra_pem:
        raise RuntimeError(f"acme.ca_bundle {extra} holds no PEM certificate")
    combined = acme_dir / CA_BUNDLE_FILE
    acme_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    combined.write_text(Path(requests.certs.where()).read_text() + "\n" + extra_pem)
    return str(combined)


def retry_after_seconds(value: str | None) -> float | None:
    """A Retry-After header (seconds, or an HTTP date) as seconds from now."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return max((when - datetime.datetime.now(datetime.UTC)).total_seconds(), 0.0)


class _Network(ClientNetwork):
    """The library's network, remembering the CA's last Retry-After (its rate-limit answers carry one)."""

    retry_after_s: float | None = None

    def __init__(self, key: jose.JWK | None, trust: str | bool, **kwargs: Any) -> None:
        super().__init__(key, **kwargs)
        # requests takes a CA bundle's path where the library's annotation says bool
        self.verify_ssl = trust  # type: ignore[assignment]

    def _send_request(self, method: str, url: str, *args: Any, **kwargs: Any) -> requests.Response:
        response = super()._send_request(method, url, *args, **kwargs)
        self.retry_after_s = retry_after_seconds(response.headers.get("Retry-After"))
        return response


def problem_text(error: messages.Error) -> str:
    """The CA's problem document as one line: its type and detail, and those of its subproblems."""
    text = f"{error.code or error.typ}: {error.detail or error.description or 'no detail given'}"
    for sub in error.subproblems or ():
        text += f"; {sub.code or sub.typ}: {sub.detail or ''}"
    return text


def _validation_text(failure: errors.ValidationError) -> str:
    reasons = []
    for authzr in failure.failed_authzrs:
        name = authzr.body.identifier.value
        for challb in authzr.body.challenges:
            if challb.error is not None:
                reasons.append(f"{name}: {problem_text(challb.error)}")
    return "; ".join(reasons) or "the CA refused the validation and gave no reason"


class CertificateAuthority:
    """One ACME directory and this installation's account on it."""

    def __init__(self, settings: AcmeSettings, acme_dir: Path) -> None:
        self._settings = settings
        self._key = load_account_key(acme_dir)
        self._verify = trust_bundle(settings, acme_dir)
        self._account: messages.RegistrationResource | None = None
        self._account_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=settings.concurrency + 1, thread_name_prefix="acme")
        self.ca_host = urlsplit(settings.directory_url).netloc

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _run(self, net: _Network | None, call: Callable[..., T], *args: Any) -> T:
        """`call(*args)` on the pool, its failures told as OrderFailed with the CA's reason."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool, functools.partial(call, *args))
        except OrderFailed:
            raise
        except requests.exceptions.RequestException as exc:
            raise OrderFailed(f"the CA at {self.ca_host} could not be reached ({type(exc).__name__})",
                              ca_reached=False) from None
        except errors.ValidationError as exc:
            raise OrderFailed(_validation_text(exc)) from None
        except errors.IssuanceError as exc:
            raise OrderFailed(f"the CA refused to issue: {problem_text(exc.error)}") from None
        except errors.TimeoutError:
            raise OrderFailed(f"the CA did not finish within {self._settings.order_timeout_s:.0f} s") from None
        except messages.Error as exc:
            retry = net.retry_after_s if net is not None and exc.code == RATE_LIMITED else None
            raise OrderFailed(problem_text(exc), retry_after_s=retry) from None
        except errors.Error as exc:
            raise OrderFailed(f"the CA's answer was not understood ({type(exc).__name__}: {exc})") from None

    def _client(self, net: _Network) -> ClientV2:
        """A client on `net` (each order has a network of its own, with its own nonces), with the account set."""
        client = ClientV2(ClientV2.get_directory(self._settings.directory_url, net), net)
        with self._account_lock:
            if self._account is None:
                self._account = self._register(client)
            net.account = self._account
        return client

    def _register(self, client: ClientV2) -> messages.RegistrationResource:
        email_address = self._settings.contact_email
        registration = (messages.NewRegistration.from_data(email=email_address, terms_of_service_agreed=True)
                        if email_address else messages.NewRegistration.from_data(terms_of_service_agreed=True))
        try:
            account = client.new_account(registration)
        except errors.ConflictError as existing:  # this key already has an account: use it
            account = messages.RegistrationResource(uri=existing.location, body=messages.Registration())
        log.info("ACME account ready at %s", self.ca_host)
        return account

    def forget_account(self) -> None:
        with self._account_lock:
            self._account = None

    async def reachable(self) -> None:
        """Raise OrderFailed unless the directory answers (what health reports while no order runs)."""
        net = _Network(None, self._verify, user_agent=USER_AGENT, timeout=NETWORK_TIMEOUT_S)
        await self._run(net, ClientV2.get_directory, self._settings.directory_url, net)

    async def issue(self, hostname: str, publish: ChallengePublisher) -> Issued:
        """A certificate for `hostname` with a new key: order, publish the HTTP-01 answers through `publish`,
        tell the CA to validate, wait for issuance, download the chain."""
        try:
            return await self._issue(hostname, publish)
        except OrderFailed as failure:
            if failure.reason.startswith(ACCOUNT_GONE):
                self.forget_account()  # registered again on the next attempt
            raise

    async def _issue(self, hostname: str, publish: ChallengePublisher) -> Issued:
        key_pem = new_private_key_pem()
        csr_pem = crypto_util.make_csr(key_pem, [hostname])
        net = _Network(self._key, self._verify, alg=jose.ES256, user_agent=USER_AGENT, timeout=NETWORK_TIMEOUT_S)
        client = await self._run(net, self._client, net)
        order = await self._run(net, client.new_order, csr_pem)
        answers: dict[str, str] = {}
        to_answer = []
        for authzr in order.authorizations:
            if authzr.body.status == messages.STATUS_VALID:
                continue  # the CA remembers a recent validation of this name
            challb = next((c for c in authzr.body.challenges if isinstance(c.chall, challenges.HTTP01)), None)
            if challb is None:
                raise OrderFailed(f"the CA offered no http-01 challenge for {authzr.body.identifier.value}")
            response, validation = challb.response_and_validation(net.key)
            answers[challb.chall.encode("token")] = validation
            to_answer.append((challb, response))
        if answers:
            await publish(answers)  # every edge can answer before the CA asks any of them
        for challb, response in to_answer:
            await self._run(net, client.answer_challenge, challb, response)
        deadline = datetime.datetime.now() + datetime.timedelta(seconds=self._settings.order_timeout_s)
        started = time.monotonic()
        done = await self._run(net, client.poll_and_finalize, order, deadline)
        log.info("certificate for %s issued in %.1f s", hostname, time.monotonic() - started)
        return Issued(key_pem, done.fullchain_pem)
