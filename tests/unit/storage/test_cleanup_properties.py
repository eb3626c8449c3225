"""Compaction and retention never take a committed record that is still its key's latest.

A property test over random histories of a ``compact,delete`` log: keyed appends (some of them
tombstones), high-watermark advances, follower truncations at or above the high watermark,
rolls, compaction passes and retention runs, with a fake clock. A plain model keeps every record
appended and not truncated, and the high watermark the replication layer set.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rafka.storage import Log, LogConfig
from rafka.storage.compaction import compact
from rafka.storage.retention import delete_expired_segments

from .support import FakeClock, batch, read_all

MINUTE = 60_000
DELETE_RETENTION_MS = 30 * MINUTE

_record = st.tuples(st.integers(0, 3), st.one_of(st.none(), st.binary(min_size=1, max_size=12)))
_append = st.tuples(st.just("append"), st.lists(_record, min_size=1, max_size=3))
_operation = st.one_of(
    _append,
    _append,  # appends twice as often as anything else, so segments fill and roll
    st.tuples(st.just("commit"), st.integers(0, 1000)),
    st.tuples(st.just("truncate"), st.integers(0, 1000)),
    st.tuples(st.just("roll")),
    st.tuples(st.just("compact")),
    st.tuples(st.just("retain")),
    st.tuples(st.just("tick"), st.integers(1, 40 * MINUTE)),
)


class Model:
    """Every record appended and not truncated, batch boundaries, and the committed offset."""

    def __init__(self) -> None:
        self.records: dict[int, tuple[bytes, bytes | None, int]] = {}  # offset -> key, value, ts
        self.boundaries = [0]  # offsets where a batch starts or the log ends
        self.high_watermark = 0

    def latest_per_key(self) -> dict[bytes, int]:
        latest: dict[bytes, int] = {}
        for offset in sorted(self.records):
            latest[self.records[offset][0]] = offset
        return latest


def _apply(log: Log, model: Model, clock: FakeClock, operation: tuple) -> None:
    kind = operation[0]
    if kind == "append":
        keys = [str(k).encode() for k, _ in operation[1]]
        values = [v for _, v in operation[1]]
        info = log.append_as_leader(batch(values, keys, timestamp=clock.now), leader_epoch=0)
        for i, (key, value) in enumerate(zip(keys, values)):
            model.records[info.first_offset + i] = (key, value, clock.now)
        model.boundaries.append(info.last_offset + 1)
    elif kind == "commit":
        # The high watermark is some replica's log end: a batch boundary above the current one.
        ahead = [b for b in model.boundaries if b > model.high_watermark]
        if ahead:
            model.high_watermark = ahead[operation[1] % len(ahead)]
            log.update_high_watermark(model.high_watermark)
    elif kind == "truncate":
        # A follower truncates to its leader's epoch end: a boundary at or above the HW.
        allowed = [b for b in model.boundaries if b >= model.high_watermark]
        target = allowed[operation[1] % len(allowed)]
        assert log.truncate_to(target) == target
        model.records = {o: r for o, r in model.records.items() if o < target}
        model.boundaries = [b for b in model.boundaries if b <= target]
    elif kind == "roll":
        log.roll()
    elif kind == "compact":
        compact(log, clock.now, force=True)
    elif kind == "retain":
        delete_expired_segments(log, clock.now)
    elif kind == "tick":
        clock.advance(operation[1])


def _check(log: Log, model: Model, clock: FakeClock) -> None:
    # (b) Cleanup never moves the high watermark, and the log start never passes it.
    assert log.high_watermark == model.high_watermark
    assert log.log_start_offset <= log.high_watermark <= log.log_end_offset
    assert log.log_end_offset == model.boundaries[-1]
    read = read_all(log)
    offsets = [offset for offset, _, _, _ in read]
    # (c) Offsets strictly increase: no duplicates, no reordering.
    assert all(a < b for a, b in zip(offsets, offsets[1:]))
    found = {offset: (key, value) for offset, key, value, _ in read}
    # (a) The latest record of each key below the high watermark is still there, as written;
    # a tombstone may go once delete.retention.ms has passed since its timestamp.
    tombstone_horizon = clock.now - DELETE_RETENTION_MS
    for offset in model.latest_per_key().values():
        if not log.log_start_offset <= offset < model.high_watermark:
            continue
        key, value, timestamp = model.records[offset]
        if value is None and timestamp < tombstone_horizon:
            continue
        assert found.get(offset) == (key, value), (
            f"committed latest record of key {key!r} at offset {offset} is gone; {log}"
        )
    # Every record the log returns is one that was appended at that offset.
    for offset, (key, value) in found.items():
        assert model.records[offset][:2] == (key, value)


@given(
    operations=st.lists(_operation, min_size=10, max_size=80),
    retention_bytes=st.sampled_from([-1, 400, 900]),
)
# At least 150 histories (about 2 s); HYPOTHESIS_PROFILE=thorough runs more.
@settings(max_examples=max(150, settings().max_examples), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
def test_cleanup_keeps_every_committed_latest_record_and_the_offset_invariant(
    tmp_path_factory, operations, retention_bytes
):
    """Under any history of appends, commits, truncations, rolls, compactions and retention
    runs, each key's latest record below the high watermark stays readable at its offset,
    log_start <= high_watermark <= log_end holds, and offsets read back strictly increase."""
    clock = FakeClock()
    config = LogConfig.from_dict({
        "cleanup.policy": "compact,delete",
        "segment.bytes": 256,
        "index.interval.bytes": 64,
        "retention.ms": 60 * MINUTE,
        "retention.bytes": retention_bytes,
        "delete.retention.ms": DELETE_RETENTION_MS,
        "min.cleanable.dirty.ratio": 0.0,
    })  # fmt: skip
    log = Log(str(tmp_path_factory.mktemp("cleanup") / "t-0"), config, clock)
    model = Model()
    try:
        for operation in operations:
            _apply(log, model, clock, operation)
            _check(log, model, clock)
    finally:
        log.abandon()
