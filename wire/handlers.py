"""Which handler answers which Kafka API, and the ApiVersions answer built from them.

Each ``handlers_*`` module registers its handlers with ``@handles(api_key)``; a handler is
``async (session, header, body) -> answer body | None`` (None: no answer, as for a produce
with acks=0). Only APIs with a handler are advertised, at the versions the codec serves.
"""

from __future__ import annotations

from typing import Awaitable, Callable

from rafka.wire import frames
from rafka.wire.session import Session

Handler = Callable[[Session, frames.RequestHeader, dict], Awaitable[dict | None]]

_HANDLERS: dict[int, Handler] = {}

API_VERSIONS = 18


def handles(api_key: int) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        if api_key in _HANDLERS:
            raise RuntimeError(f"api key {api_key} has two handlers")
        _HANDLERS[api_key] = handler
        return handler

    return register


def handler_for(api_key: int) -> Handler | None:
    _load()
    return _HANDLERS.get(api_key)


def advertised_versions() -> list[dict]:
    """ApiVersions' api_keys: every API with a handler, at the codec's versions."""
    _load()
    out = []
    for api_key in sorted(_HANDLERS):
        low, high = frames.SUPPORTED[api_key]
        out.append({"api_key": api_key, "min_version": low, "max_version": high})
    return out


_loaded = False


def _load() -> None:
    """Import the handler modules (they register themselves) on first use."""
    global _loaded
    if not _loaded:
        from rafka.wire import (  # noqa: F401 - imported for their registrations
            handlers_admin,
            handlers_core,
            handlers_groups,
            handlers_security,
            handlers_transactions,
        )

        _loaded = True


@handles(API_VERSIONS)
async def api_versions(session: Session, header: frames.RequestHeader, body: dict) -> dict:
    return {"error_code": 0, "api_keys": advertised_versions(), "throttle_time_ms": 0}


def api_versions_fallback(header: frames.RequestHeader) -> bytes:
    """The answer to an ApiVersions request of a version rafka does not serve: a v0 answer
    (always readable) with UNSUPPORTED_VERSION and the advertised ranges, so the client
    retries with a version in range (Kafka's rule; librdkafka and aiokafka rely on it)."""
    return frames.encode_response(header._replace(api_version=0), {
        "error_code": 35, "api_keys": advertised_versions()})
