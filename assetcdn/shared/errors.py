"""The API's two error envelopes (docs/api-guide.md "Auth and errors"), built in one place.

Standard: ``{"error": {code, message, target, details, innererror}, HttpCode, Message, requestId, timestamp, apiVersion}``.
Legacy (auto, transform, purge, stream, analytics, signed): ``{"error": "<text>", HttpCode, Message, requestId, ...}``.
Handlers raise these; the error middleware renders them with the request's id.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from assetcdn.shared import API_VERSION, timestamps


@dataclass
class ApiError(Exception):
    """An error in the standard envelope."""

    status: int
    code: str
    message: str
    target: str | None = None
    details: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)

    def body(self, request_id: str) -> dict[str, Any]:
        return {
            "error": {"code": self.code, "message": self.message, "target": self.target,
                      "details": self.details, "innererror": None},
            "HttpCode": self.status,
            "Message": self.message,
            **self.extra,
            "requestId": request_id,
            "timestamp": timestamps.utc_now_iso(),
            "apiVersion": API_VERSION,
        }


def as_legacy(error: ApiError) -> LegacyError:
    """The same error for a legacy-envelope path (a shared helper raised it there)."""
    return LegacyError(error.status, error.message, extra=error.extra, headers=error.headers)


@dataclass
class LegacyError(Exception):
    """An error in the legacy envelope: ``error`` is a string (text, or a code such as ``limit_reached``)."""

    status: int
    error: str
    message: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)

    def body(self, request_id: str) -> dict[str, Any]:
        return {
            "error": self.error,
            "HttpCode": self.status,
            "Message": self.message or self.error,
            **self.extra,
            "requestId": request_id,
            "timestamp": timestamps.utc_now_iso(),
            "apiVersion": API_VERSION,
        }


# Constructors for the errors every plane raises, so codes and wording stay uniform.

def bad_request(message: str, target: str | None = None, code: str = "InvalidParameter", **extra: Any) -> ApiError:
    return ApiError(400, code, message, target=target, extra=extra)


def unauthorized(message: str = "Missing or invalid credentials. Send the key this endpoint accepts "
                 "(AccessKey, AccountKey, x-api-key) or an 'Authorization: Bearer cdnsk_...' token with the required scope.") -> ApiError:
    return ApiError(401, "Unauthorized", message)


def not_found(message: str, target: str | None = None, code: str = "NotFound") -> ApiError:
    return ApiError(404, code, message, target=target)


def conflict(message: str, target: str | None = None, code: str = "Conflict") -> ApiError:
    return ApiError(409, code, message, target=target)


def payload_too_large(message: str, max_size: int) -> ApiError:
    return ApiError(413, "PayloadTooLarge", message, extra={"MaxSize": max_size})
