"""Log lines that say which actor wrote them.

Every rafka actor runs in a Ray worker process of its own, and Ray streams the worker's
output to the driver prefixed only with the class name and pid ("(PartitionReplica pid=42)"),
which does not say which of hundreds of replicas spoke. So each line starts with the actor
and its identity:

    [PartitionReplica orders-3 broker 1] leads in epoch 4 (ISR [1, 2], log end 1200)
    [GroupCoordinator shard 0] loaded 3 group(s) in 0.12 s
    [NodeAgent disk local broker 1] could not ...

Actor modules log through an ``ActorLogger`` (a ``logging.LoggerAdapter``) made by
``actor_logger``. The storage engine and the decision layer log through plain module loggers
(they know nothing of actors); ``label_process_logs`` gives their lines (and any other
rafka line without it) the same prefix in an actor's process. The prefix is part of the
message, not of a formatter, because Ray's worker processes print records with whatever
formatting (often none) the process has.

No Ray import here: the helpers are plain Python and unit-tested without Ray.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["ActorLogger", "actor_logger", "label_process_logs", "log_prefix"]

#: Loggers whose records ``label_process_logs`` prefixes (rafka's, not Ray's or others').
_LABELLED = "rafka."


def log_prefix(
    actor: str,
    topic: str | None = None,
    partition: int | None = None,
    broker: int | None = None,
    **labels: Any,
) -> str:
    """``[Actor topic-partition label value ... broker N]``; parts that are None are left
    out. ``log_prefix("PartitionReplica", "orders", 3, 1)`` is
    ``"[PartitionReplica orders-3 broker 1]"``; ``log_prefix("GroupCoordinator", shard=0)``
    is ``"[GroupCoordinator shard 0]"``."""
    parts = [actor]
    if topic is not None:
        parts.append(topic if partition is None else f"{topic}-{partition}")
    parts.extend(f"{key} {value}" for key, value in labels.items() if value is not None)
    if broker is not None:
        parts.append(f"broker {broker}")
    return "[" + " ".join(parts) + "]"


class _ActorMessage(str):
    """A message an ActorLogger prefixed already: the process label leaves it alone (a
    host's process carries many replicas, each with its own prefix)."""


def _prefixed(prefix: str, msg: object, has_args: bool) -> str:
    # With arguments the message is a %-format: a '%' in the prefix must not become a
    # conversion (topic names cannot hold one today; disk and group names might).
    head = prefix.replace("%", "%%") if has_args else prefix
    return f"{head} {msg}"


class ActorLogger(logging.LoggerAdapter):
    """A module logger whose messages start with one actor's prefix (see ``log_prefix``).
    The prefix is also on each record as ``record.rafka_actor``, for formatters that want it.
    ``relabel`` changes it (a node agent learns its broker id after it starts)."""

    def __init__(self, logger: logging.Logger, prefix: str) -> None:
        super().__init__(logger, {"rafka_actor": prefix})
        self.prefix = prefix

    def relabel(self, prefix: str) -> None:
        """Use ``prefix`` from now on."""
        self.prefix = prefix
        self.extra = {"rafka_actor": prefix}

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        # Overridden rather than ``process`` because escaping the prefix depends on args.
        if not self.isEnabledFor(level):
            return
        kwargs["extra"] = {**(kwargs.get("extra") or {}), **self.extra}
        # The caller of info()/warning() is the line to report, not this method.
        kwargs["stacklevel"] = kwargs.get("stacklevel", 1) + 1
        message = _ActorMessage(_prefixed(self.prefix, msg, bool(args)))
        self.logger.log(level, message, *args, **kwargs)


def actor_logger(name: str, actor: str, **context: Any) -> ActorLogger:
    """The logger ``name`` (a module's ``__name__``) labelled for one actor; ``context`` as
    for ``log_prefix`` (topic, partition, broker, other labels)."""
    return ActorLogger(logging.getLogger(name), log_prefix(actor, **context))


# -- the other layers' lines, in an actor's process ---------------------------------------------

_process_prefix: str | None = None


def label_process_logs(prefix: str) -> None:
    """Prefix every record of rafka's loggers logged in this process with ``prefix``, unless
    an ActorLogger prefixed it already (so the storage engine's and the decision layer's
    lines say which actor they come from; a replica host's replicas keep their own
    prefixes). Call it only inside an actor's own process (Ray runs each actor in a process
    of its own, so the process is the actor); a second call replaces the prefix. Other
    loggers (Ray's, the libraries') are left alone."""
    global _process_prefix
    first = _process_prefix is None
    _process_prefix = prefix
    if not first:
        return
    # Chained onto the current factory (Ray installs one of its own in workers).
    previous = logging.getLogRecordFactory()

    def labelled(name: str, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(name, *args, **kwargs)
        prefix_now = _process_prefix
        if prefix_now is not None and name.startswith(_LABELLED):
            head = _prefixed(prefix_now, "", bool(record.args))
            if not isinstance(record.msg, _ActorMessage) and not (
                isinstance(record.msg, str) and record.msg.startswith(head)
            ):  # fmt: skip
                record.msg = head + str(record.msg)
                record.rafka_actor = prefix_now
        return record

    logging.setLogRecordFactory(labelled)
