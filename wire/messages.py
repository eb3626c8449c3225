"""The registry of served APIs: api key -> schema, and the version ranges rafka advertises.

``SUPPORTED`` is what ApiVersions advertises. Produce is advertised from v0 (old librdkafka
enables compression codecs only when it sees Produce v0) but its handler refuses v0-2, as
Kafka 4 does; the codec still decodes them.
"""

from __future__ import annotations

from rafka.wire import (
    messages_admin,
    messages_groups,
    messages_metadata,
    messages_produce_fetch,
    messages_security,
    messages_txn,
)
from rafka.wire.schema import Api

API_VERSIONS_KEY = 18

APIS: dict[int, Api] = {
    api.key: api
    for module in (messages_produce_fetch, messages_metadata, messages_groups,
                   messages_admin, messages_txn, messages_security)
    for api in vars(module).values() if isinstance(api, Api)
}

SUPPORTED: dict[int, tuple[int, int]] = {
    key: (api.min_version, api.max_version) for key, api in sorted(APIS.items())
}

# Compile every codec at import: a schema mistake fails here, not on a client's first request,
# and no request pays the compile cost (about 30 ms in all).
for _api in APIS.values():
    _api.compile_all()
