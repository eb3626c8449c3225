"""The storage engine: a partition's log on local disk. No Ray imports in this package.

Layers inside, lowest first: ``record_batch`` (the pure codec) and ``transaction_markers``
(reading a marker's one record), ``index``, ``transaction_index`` and ``segment`` (one file
set), ``log_segments`` (the ordered segments: lookups, reads), ``leader_epoch`` and
``producer_state`` (state kept beside the log), ``log_loader`` (recovery on open),
``log_validator`` (checks and offset assignment before an append), ``flush_policy`` (when to
fsync), ``log`` with ``log_removals`` and ``log_transactions`` (the partition log),
``retention`` and ``compaction`` (cleanup policies), ``config`` (topic configuration), and
``read_committed`` (the consumer's filter of aborted transactions, pure logic).
"""

from rafka.storage.config import LogConfig
from rafka.storage.log import Log, LogAppendInfo, LogReadResult, partition_dir
from rafka.storage.log_loader import RecoveryReport

__all__ = ["Log", "LogAppendInfo", "LogConfig", "LogReadResult", "RecoveryReport", "partition_dir"]
