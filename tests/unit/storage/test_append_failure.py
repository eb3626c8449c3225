"""An append that fails part way (a full disk) leaves the log exactly as it was, so the
follower's retry writes each offset once. A follower append of more batches than one writev
takes is written in several calls; a failure in a later call must take back the earlier."""

from __future__ import annotations

import errno

import pytest

from rafka.errors import KafkaStorageError
from rafka.storage import record_batch as rb
from rafka.storage import segment as segment_module
from rafka.storage.config import LogConfig
from rafka.storage.log import Log


def follower_batches(count: int) -> bytes:
    out = []
    for offset in range(count):
        buf = bytearray(rb.encode_batch([b"v%d" % offset], timestamps=1000,
                                        partition_leader_epoch=1))  # fmt: skip
        rb.set_base_offset(buf, offset)
        out.append(bytes(buf))
    return b"".join(out)


def read_offsets(log: Log) -> list[int]:
    data = log.read(0, 1 << 30).records
    view, pos, offsets = memoryview(data), 0, []
    while pos < len(view):
        header = rb.read_header(view, pos)
        offsets.append(header.base_offset)
        pos += header.size
    return offsets


@pytest.mark.parametrize("index_interval_bytes", [4096, 1 << 30])
def test_a_failed_multi_call_follower_append_is_taken_back_whole(tmp_path, monkeypatch,
                                                                 index_interval_bytes):  # fmt: skip
    """The second writev of a 1,100-batch append fails: nothing of the append stays, and the
    retry leaves offsets 0..1099 each once."""
    log = Log(str(tmp_path / "p-0"), LogConfig.from_dict({"index.interval.bytes":
                                                             index_interval_bytes}))  # fmt: skip
    data = follower_batches(1100)
    real_writev = segment_module.os.writev
    calls = []

    def failing_writev(fd, parts):
        calls.append(len(parts))
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_writev(fd, parts)

    monkeypatch.setattr(segment_module.os, "writev", failing_writev)
    with pytest.raises(KafkaStorageError):
        log.append_as_follower(data)
    assert len(calls) == 2
    assert (log.log_end_offset, log.active_segment.size, read_offsets(log)) == (0, 0, [])
    monkeypatch.setattr(segment_module.os, "writev", real_writev)
    log.append_as_follower(data)
    assert read_offsets(log) == list(range(1100))
    assert log.log_end_offset == 1100
    log.close()
