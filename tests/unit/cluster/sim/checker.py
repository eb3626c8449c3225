"""The checker: the truth the invariants are judged against, and the checks themselves."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from tests.unit.cluster.sim.config import InvariantViolation

if TYPE_CHECKING:
    from tests.unit.cluster.sim.broker import Disk
    from tests.unit.cluster.sim.replica import Replica
    from tests.unit.cluster.sim.runner import Simulation


class Checker:
    """The truth the invariants are checked against: each partition's committed log
    (records below the highest high watermark a leader exposed, taken from that leader's
    log), every acknowledged and refused record, and who led each epoch."""

    def __init__(self, sim: "Simulation") -> None:
        self.sim = sim
        self.committed: dict[int, list[tuple[int, int]]] = {p: [] for p in sim.partitions}
        self.acked: dict[int, dict[int, int]] = {p: {} for p in sim.partitions}
        self.refused: set[int] = set()
        self.leaders: dict[tuple[int, int], tuple[int, int]] = {}

    def on_leadership(self, replica: Replica, epoch: int) -> None:
        me = (replica.b, replica.incarnation)
        holder = self.leaders.setdefault((replica.p, epoch), me)
        if holder != me:
            raise InvariantViolation(1, f"broker {me[0]} (incarnation {me[1]}) leads p{replica.p} "
                                        f"in epoch {epoch}, already led by broker {holder[0]} "
                                        f"(incarnation {holder[1]})")  # fmt: skip

    def on_leader_high_watermark(self, replica: Replica) -> None:
        """A leader exposed a new high watermark: what lies below it is committed."""
        committed = self.committed[replica.p]
        log = replica.disk.log
        if replica.hw > len(log):
            raise InvariantViolation(3, f"{replica!r} high watermark {replica.hw} is past its "
                                        f"log end {len(log)}")  # fmt: skip
        if replica.hw <= len(committed):
            return
        agree = _agreement(replica.disk, committed)
        if agree < len(committed):
            raise InvariantViolation(4, f"leader {replica!r} exposes high watermark {replica.hw} "
                                        f"but holds {log[agree]} at offset {agree} where "
                                        f"{committed[agree]} is committed")  # fmt: skip
        committed.extend(log[len(committed) : replica.hw])
        self.sim.dirty.add(replica.p)

    def on_ack(self, p: int, offset: int, rid: int) -> None:
        sim = self.sim
        record = self.committed[p][offset]
        if record[1] != rid:
            raise InvariantViolation(4, f"p{p} acknowledged id {rid} at offset {offset} where "
                                        f"{record} is committed")  # fmt: skip
        self.acked[p][offset] = rid
        sim.stats["acknowledged"] += 1
        disks = [sim.brokers[b].disks[p] for b in sim.partitions[p]]
        holders = [d for d in disks if _at(d.log, offset) == record or d.lost.get(offset) == record]
        if len(holders) < sim.cfg.min_insync_replicas:
            raise InvariantViolation(6, f"p{p} acknowledged id {rid} at offset {offset}, "
                                        f"received by {len(holders)} replica(s) only")

    def check_partition(self, p: int) -> None:
        """Invariants 4 and 5 for every live replica of ``p``."""
        sim = self.sim
        committed = self.committed[p]
        isr = sim.controller.states[p].isr
        for b in sim.partitions[p]:
            broker = sim.brokers[b]
            if not broker.up:
                continue
            replica = broker.replicas[p]
            log = replica.disk.log
            agree = _agreement(replica.disk, committed)
            if replica.hw > len(committed):
                raise InvariantViolation(5, f"{replica!r} exposes high watermark {replica.hw} "
                                            f"above the committed point {len(committed)}")
            if replica.checked_in and b in isr and agree < len(committed):
                raise InvariantViolation(4, f"ISR member {replica!r} lacks committed record "
                                            f"{committed[agree]} at offset {agree} (it has "
                                            f"{_at(log, agree)}; committed point "
                                            f"{len(committed)}, ISR {isr})")  # fmt: skip
            if agree < min(replica.hw, len(log)):
                raise InvariantViolation(5, f"{replica!r} holds {log[agree]} at offset {agree} "
                                            f"below its high watermark {replica.hw}; "
                                            f"committed there: {committed[agree]}")  # fmt: skip

    def final_check(self, leaders: dict[int, Replica]) -> None:
        """After healing: every acknowledged record once at its offset, no refused one."""
        for p, leader in leaders.items():
            log = leader.disk.log
            ids = [rid for _, rid in log]
            if len(set(ids)) != len(ids):
                twice = sorted(rid for rid, n in Counter(ids).items() if n > 1)
                raise InvariantViolation(4, f"p{p}: ids {twice[:5]} are in the final log twice")
            for offset, rid in sorted(self.acked[p].items()):
                if _at(log, offset) is None or log[offset][1] != rid:
                    raise InvariantViolation(4, f"p{p}: acknowledged id {rid} at offset {offset} "
                                                f"is not in the final log of {leader!r}, which "
                                                f"has {_at(log, offset)} there")  # fmt: skip
            refused = self.refused.intersection(ids)
            if refused:
                raise InvariantViolation(4, f"p{p}: refused ids {sorted(refused)[:5]} are in "
                                            "the final log")  # fmt: skip


def _agreement(disk: Disk, committed: list) -> int:
    """Extend (and return) how long a prefix of the disk's log equals the committed log."""
    log = disk.log
    agree = disk.agree
    limit = min(len(log), len(committed))
    while agree < limit and log[agree] == committed[agree]:
        agree += 1
    disk.agree = agree
    return agree


def _at(log: list, offset: int):
    return log[offset] if 0 <= offset < len(log) else None
