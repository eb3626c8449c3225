"""When a log fsyncs: after ``flush.messages`` records, or once ``flush.ms`` has passed.

Holds only the bookkeeping (records appended since the last flush, when it happened); the Log
does the fsync and tells the policy. Times are milliseconds from the log's clock.
"""

from __future__ import annotations

from rafka.storage.config import LONG_MAX, LogConfig


class FlushPolicy:
    """Counts unflushed records and says when a flush is due. ``flush_ms == LONG_MAX`` (the
    default) means never by time; ``flush_messages == LONG_MAX`` never by count."""

    def __init__(self, config: LogConfig, now_ms: int) -> None:
        self.flush_messages = config.flush_messages
        self.flush_ms = config.flush_ms
        self.unflushed_messages = 0
        self.last_flush_ms = now_ms

    def record_append(self, record_count: int) -> None:
        self.unflushed_messages += record_count

    def record_flush(self, now_ms: int) -> None:
        self.unflushed_messages = 0
        self.last_flush_ms = now_ms

    def due_after_append(self, now_ms: int) -> bool:
        """True when the records just appended reach flush.messages, or flush.ms has run out."""
        return self.unflushed_messages >= self.flush_messages or (
            self.flush_ms != LONG_MAX and now_ms - self.last_flush_ms >= self.flush_ms
        )

    def due_on_timer(self, now_ms: int) -> bool:
        """True when unflushed records have waited flush.ms (a periodic timer asks)."""
        return bool(self.unflushed_messages) and now_ms - self.last_flush_ms >= self.flush_ms
