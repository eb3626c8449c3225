"""A Jepsen-style checker of transactional writes against read_committed reads (plain
Python: the chaos run feeds it, and a test plants each anomaly in it).

What it is given, all JSON-friendly so a dumped run can be checked again by hand:

- ``txns``: every transaction as its producer ran it, a dict with ``producer``, ``number``
  (the producer's own count), ``status`` and ``writes`` (``[topic, partition, value]``, each
  value unique to one write), plus whatever history the run keeps (``error``, times,
  attempts) to quote as evidence. ``status`` is Jepsen's: ``ok`` (commit_transaction
  returned), ``fail`` (definitely not committed: aborted, fenced, abortable, or a commit
  refused without any earlier attempt timing out), ``info`` (the commit's outcome is unknown),
  or ``pending`` (still running when the run stopped: treated as ``info``).
- ``polls``: ``{reader: [[seconds, topic, partition, offset, value], ...]}`` in the order each
  read_committed consumer returned them; a reader is one consumer, never seeked, so its
  offsets per partition must go up.
- ``final``: ``[[topic, partition, offset, value], ...]``, a full read_committed read of every
  partition, from its start to its end offset (the last stable offset), once nothing is open.

Anomalies, each counted under its own name (all must be zero):

- ``lost``: a value of an ok transaction missing from the final read;
- ``duplicated``: a value read at two positions (partition, offset), over all reads;
- ``inconsistent_offsets``: two values read at one position, over all reads;
- ``aborted_reads`` (G1a): a value of a failed transaction in any read;
- ``torn_transactions``: an ok or info transaction partly in the final read (info must be
  all or nothing);
- ``read_then_missing``: a value a read_committed poll returned (so committed) that the final
  read does not have (counted once per value, if its transaction did not fail);
- ``nonmonotonic_reads``: a reader's offset in a partition not above its previous one;
- ``unknown_values``: a value nobody wrote; ``misplaced_values``: a value read in another
  partition than the one it was written to;
- ``producer_order``: in the final read of a partition, one producer's values out of the order
  it wrote them (its transactions run one after another).
"""

from __future__ import annotations

import collections
from typing import Any, Iterable

CHECKS = (
    "lost", "duplicated", "inconsistent_offsets", "aborted_reads", "torn_transactions",
    "read_then_missing", "nonmonotonic_reads", "unknown_values", "misplaced_values",
    "producer_order",
)  # fmt: skip
#: Examples kept per anomaly.
EXAMPLES = 5
#: Sightings quoted per example value.
SIGHTINGS = 6

Position = tuple[str, int, int]  # (topic, partition, offset)


def check(txns: list[dict], polls: dict[str, list[list]], final: list[list]) -> dict[str, Any]:
    """Counts of every anomaly with a few examples each (the value, where it was read and
    its transaction's history), and the figures of the run's outcomes."""
    counts: collections.Counter = collections.Counter()
    examples: dict[str, list] = collections.defaultdict(list)
    writer: dict[str, tuple[int, int]] = {}  # value -> (index in txns, index in its writes)
    for t, txn in enumerate(txns):
        for w, (_, _, value) in enumerate(txn["writes"]):
            writer[value] = (t, w)

    sightings: dict[str, list] = collections.defaultdict(list)  # value -> [reader, s, tp, off]
    at: dict[Position, set[str]] = collections.defaultdict(set)
    where: dict[str, set[Position]] = collections.defaultdict(set)
    polled: set[str] = set()

    def seen(reader: str, seconds: float | None, topic: str, partition: int, offset: int,
             value: str) -> None:  # fmt: skip
        at[(topic, partition, offset)].add(value)
        where[value].add((topic, partition, offset))
        if len(sightings[value]) < SIGHTINGS:
            sightings[value].append([reader, seconds, f"{topic}-{partition}", offset])

    def evidence(value: str) -> dict[str, Any]:
        found = writer.get(value)
        history = None if found is None else _history(txns[found[0]])
        return {"value": value, "read": sightings.get(value, []), "transaction": history}

    def bad(kind: str, example: Any) -> None:
        counts[kind] += 1
        if len(examples[kind]) < EXAMPLES:
            examples[kind].append(example)

    for reader, records in sorted(polls.items()):
        last: dict[tuple[str, int], int] = {}
        for seconds, topic, partition, offset, value in records:
            seen(reader, seconds, topic, partition, offset, value)
            polled.add(value)
            previous = last.get((topic, partition))
            if previous is not None and offset <= previous:
                bad("nonmonotonic_reads", {"reader": reader, "partition": f"{topic}-{partition}",
                                           "offset": offset, "after": previous, "at_s": seconds,
                                           "value": value})  # fmt: skip
            last[(topic, partition)] = offset
    in_final: dict[str, list[Position]] = collections.defaultdict(list)
    for topic, partition, offset, value in final:
        seen("final", None, topic, partition, offset, value)
        in_final[value].append((topic, partition, offset))

    for position, values in sorted(at.items()):
        if len(values) > 1:
            bad("inconsistent_offsets", {"position": f"{position[0]}-{position[1]}@{position[2]}",
                                         "values": [evidence(v) for v in sorted(values)]})
    for value, positions in sorted(where.items()):
        found = writer.get(value)
        if len(positions) > 1:
            bad("duplicated", {**evidence(value), "positions": sorted(map(list, positions))})
        if found is None:
            bad("unknown_values", evidence(value))
            continue
        topic, partition, _ = txns[found[0]]["writes"][found[1]]
        if any((t, p) != (topic, partition) for t, p, _ in positions):
            bad("misplaced_values", {**evidence(value), "written_to": f"{topic}-{partition}"})
        if txns[found[0]]["status"] == "fail":
            bad("aborted_reads", evidence(value))
        elif value in polled and value not in in_final:
            bad("read_then_missing", evidence(value))

    outcomes: collections.Counter = collections.Counter()
    for txn in txns:
        status = _status(txn)
        values = [value for _, _, value in txn["writes"]]
        visible = sum(1 for v in values if v in in_final)
        outcomes[f"{status}_txns"] += 1
        outcomes[f"{status}_values"] += len(values)
        if status == "info":
            outcomes["info_txns_visible" if visible else "info_txns_invisible"] += 1
        if status == "ok":
            for value in values:
                if value not in in_final:
                    bad("lost", evidence(value))
        if status in ("ok", "info") and 0 < visible < len(values):
            bad("torn_transactions", {**_history(txn), "visible": visible,
                                      "missing": [v for v in values if v not in in_final]})

    for problem in _producer_order(final, writer, txns):
        bad("producer_order", problem)

    return {
        "violations": {kind: counts[kind] for kind in CHECKS},
        "outcomes": dict(outcomes),
        "polled_records": sum(len(r) for r in polls.values()),
        "final_records": len(final),
        "examples": dict(examples),
    }


def _status(txn: dict) -> str:
    return "info" if txn["status"] == "pending" else txn["status"]


def _history(txn: dict) -> dict[str, Any]:
    """What the run knows of a transaction, for an example (every field it kept)."""
    return dict(txn)


def _producer_order(final: Iterable[list], writer: dict[str, tuple[int, int]],
                    txns: list[dict]) -> list[dict]:  # fmt: skip
    """Per partition and producer, the (transaction, write) numbers of its values in offset
    order must go up: a producer's transactions are sequential and its writes in one are
    sent in order."""
    problems = []
    last: dict[tuple[str, int, int], tuple[tuple[int, int], int, str]] = {}
    for topic, partition, offset, value in sorted(final, key=lambda r: (r[0], r[1], r[2])):
        found = writer.get(value)
        if found is None:
            continue
        txn = txns[found[0]]
        rank = (txn["number"], found[1])
        key = (topic, partition, txn["producer"])
        before = last.get(key)
        if before is not None and rank < before[0]:
            problems.append({"partition": f"{topic}-{partition}", "producer": txn["producer"],
                             "earlier": [before[2], before[1]], "later": [value, offset]})
        last[key] = (rank, offset, value)
    return problems
