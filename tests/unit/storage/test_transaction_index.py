"""The aborted-transaction index file: its bytes, its lookups, and a damaged tail."""

import os
import struct

import pytest

from rafka.storage import record_batch as rb
from rafka.storage.transaction_index import ENTRY_SIZE, AbortedTxn, TransactionIndex


@pytest.fixture
def index(tmp_path):
    made = []

    def _make(base_offset=100):
        idx = TransactionIndex(str(tmp_path / f"{base_offset:020d}.txnindex"), base_offset)
        made.append(idx)
        return idx

    yield _make
    for idx in made:
        idx.close()


def test_an_entry_is_four_big_endian_int64s_and_a_crc32c(index):
    """The 36 bytes of an entry, pinned: producer id, first offset, last offset, last stable
    offset, then the CRC32C of those 32 bytes."""
    idx = index()
    assert idx.append(AbortedTxn(7, 90, 105, 101)) is True  # the file was created
    fields = struct.pack(">qqqq", 7, 90, 105, 101)
    with open(idx.path, "rb") as f:
        assert f.read() == fields + struct.pack(">I", rb.crc32c(fields))
    assert ENTRY_SIZE == 36


def test_no_file_exists_until_the_first_entry(index):
    idx = index()
    assert idx.entries == []
    assert idx.collect(0, 1000) == ([], False)
    assert not os.path.exists(idx.path)


def test_entries_reload_in_marker_order(index):
    idx = index()
    entries = [AbortedTxn(1, 95, 100, 96), AbortedTxn(2, 96, 110, 111)]
    for entry in entries:
        assert idx.append(entry) is (entry is entries[0])
    idx.close()
    assert index().entries == entries


def test_an_entry_must_follow_the_last_marker_and_lie_in_the_segment(index):
    idx = index()
    idx.append(AbortedTxn(1, 95, 105, 106))
    with pytest.raises(ValueError):
        idx.append(AbortedTxn(2, 95, 105, 106))
    with pytest.raises(ValueError):
        index(200).append(AbortedTxn(2, 95, 150, 151))


def test_collect_returns_overlapping_transactions_and_stops_at_a_last_stable_offset(index):
    """An entry whose last stable offset reaches the range's end proves no later abort can
    concern the range: the search is complete."""
    idx = index()
    idx.append(AbortedTxn(1, 100, 101, 102))
    idx.append(AbortedTxn(2, 102, 104, 103))
    idx.append(AbortedTxn(3, 103, 106, 107))
    assert idx.collect(102, 104) == ([AbortedTxn(2, 102, 104, 103), AbortedTxn(3, 103, 106, 107)],
                                     True)  # fmt: skip
    assert idx.collect(101, 103) == ([AbortedTxn(1, 100, 101, 102), AbortedTxn(2, 102, 104, 103)],
                                     True)  # fmt: skip
    assert idx.collect(107, 200) == ([], False)


@pytest.mark.parametrize("tail", [b"\0" * ENTRY_SIZE, b"\x01\x02\x03", b"\xff" * 40])
def test_a_damaged_tail_is_cut_when_loaded(index, tail):
    """Torn, zero-filled or garbage bytes after the last good entry go; the entries before
    them stay."""
    idx = index()
    idx.append(AbortedTxn(1, 95, 100, 101))
    idx.close()
    with open(idx.path, "ab") as f:
        f.write(tail)
    again = index()
    assert again.entries == [AbortedTxn(1, 95, 100, 101)]
    assert os.path.getsize(again.path) == ENTRY_SIZE


def test_truncate_to_drops_entries_whose_marker_is_at_or_after_the_offset(index):
    idx = index()
    idx.append(AbortedTxn(1, 95, 100, 101))
    idx.append(AbortedTxn(2, 99, 103, 104))
    idx.truncate_to(103)
    assert idx.entries == [AbortedTxn(1, 95, 100, 101)]
    assert os.path.getsize(idx.path) == ENTRY_SIZE


def test_replace_from_rewrites_only_entries_that_differ(index):
    """The log's replay hands over the entries from the replay's start: the same entries
    leave the file untouched; others replace the tail."""
    idx = index()
    idx.append(AbortedTxn(1, 95, 100, 101))
    idx.append(AbortedTxn(2, 99, 103, 104))
    idx.close()
    before = os.stat(idx.path).st_mtime_ns
    again = index()
    assert again.replace_from(102, [AbortedTxn(2, 99, 103, 104)]) is False
    assert os.stat(idx.path).st_mtime_ns == before
    again.replace_from(101, [AbortedTxn(3, 101, 105, 106)])
    again.close()
    assert index().entries == [AbortedTxn(1, 95, 100, 101), AbortedTxn(3, 101, 105, 106)]
