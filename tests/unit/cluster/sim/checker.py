"""The checker: the truth the invariants are judged against, and the checks themselves."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from tests.unit.cluster.sim.config import InvariantViolation, State
from tests.unit.cluster.sim.log import TRUNCATED, Entry

if TYPE_CHECKING:
    from rafka.cluster.metadata import PartitionState
    from tests.unit.cluster.sim.log import Disk
    from tests.unit.cluster.sim.replica import Replica
    from tests.unit.cluster.sim.runner import Simulation


class Checker:
    """The truth the invariants are checked against: each partition's committed log
    (records below the highest high watermark a leader exposed, taken from that leader's
    log, less what physics took: see ``_judge_losses``), every acknowledged, refused and
    physically lost record, who led each epoch, and what the controller recorded: the leader
    of each (partition, leader epoch) and the newest state of each partition, over every
    controller process, kept apart from the controller's metadata."""

    def __init__(self, sim: "Simulation") -> None:
        self.sim = sim
        self.committed: dict[int, list[Entry]] = {p: [] for p in sim.partitions}
        self.acked: dict[int, dict[int, int]] = {p: {} for p in sim.partitions}
        self.refused: set[int] = set()
        self.physically_lost: set[int] = set()
        self.leaders: dict[tuple[int, int], tuple[int, int]] = {}
        self.recorded_leaders: dict[tuple[int, int], int] = {}
        self.recorded: dict[int, tuple[int, int]] = {
            p: State.of(s).version for p, s in sim.metadata.states.items()
        }
        self.min_isr = min(sim.cfg.min_insync_replicas, sim.cfg.replication_factor)

    def _disks(self, p: int) -> list[Disk]:
        return [self.sim.brokers[b].disks[p] for b in self.sim.partitions[p]]

    def on_leadership(self, replica: Replica, epoch: int) -> None:
        me = (replica.b, replica.incarnation)
        holder = self.leaders.setdefault((replica.p, epoch), me)
        if holder != me:
            raise InvariantViolation(1, f"broker {me[0]} (incarnation {me[1]}) leads p{replica.p} "
                                        f"in epoch {epoch}, already led by broker {holder[0]} "
                                        f"(incarnation {holder[1]})")  # fmt: skip

    def on_recorded(self, state: PartitionState) -> None:
        """The controller recorded ``state`` in its metadata log: a leader epoch is handed
        to one leader only (or to none: NO_LEADER), across every controller process
        (invariant 1), and the epochs only grow (invariant 2)."""
        p, epoch = state.partition, state.leader_epoch
        holder = self.recorded_leaders.setdefault((p, epoch), state.leader)
        if holder != state.leader:
            raise InvariantViolation(1, f"the controller recorded broker {state.leader} as the "
                                        f"leader of p{p} in epoch {epoch}, already recorded for "
                                        f"broker {holder}")  # fmt: skip
        version = State.of(state).version
        if version <= self.recorded[p]:
            raise InvariantViolation(2, f"the controller recorded p{p} at (leader epoch, "
                                        f"partition epoch) {version}, after {self.recorded[p]}")
        self.recorded[p] = version

    def on_leader_high_watermark(self, replica: Replica) -> None:
        """A leader exposed a new high watermark: what lies below it is committed, and each
        newly committed record was received by at least min ISR replicas (invariant 7)."""
        p = replica.p
        committed = self.committed[p]
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
        disks = self._disks(p)
        for offset in range(len(committed), replica.hw):
            holders = sum(d.received(offset, log[offset]) for d in disks)
            if holders < self.min_isr:
                raise InvariantViolation(7, f"leader {replica!r} exposes high watermark "
                                            f"{replica.hw} over {log[offset]} at offset {offset},"
                                            f" held by {holders} replica(s) only")  # fmt: skip
        committed.extend(log[len(committed) : replica.hw])
        self.sim.dirty.add(p)

    def on_ack(self, p: int, offset: int, rid: int) -> None:
        """The leader answers a produce (acks=all) for the record at ``offset``."""
        sim = self.sim
        record = self.committed[p][offset]
        if record.rid != rid:
            raise InvariantViolation(4, f"p{p} acknowledged id {rid} at offset {offset} where "
                                        f"{record} is committed")  # fmt: skip
        sim.stats["acknowledged"] += 1
        holders = sum(d.received(offset, record) for d in self._disks(p))
        if holders < sim.cfg.min_insync_replicas:
            raise InvariantViolation(6, f"p{p} acknowledged id {rid} at offset {offset}, "
                                        f"received by {holders} replica(s) only")

    def on_acknowledged(self, p: int, base_offset: int, rids: tuple[int, ...]) -> None:
        """The producer learnt that its batch is written at ``base_offset``."""
        committed = self.committed[p]
        for offset, rid in enumerate(rids, base_offset):
            self.acked[p][offset] = rid
            here = committed[offset].rid if offset < len(committed) else None
            if here != rid and rid not in self.physically_lost:
                raise InvariantViolation(4, f"p{p}: the producer was told id {rid} is at offset "
                                            f"{offset}, where id {here} is committed")

    def check_partition(self, p: int) -> None:
        """Losses judged (``_judge_losses``); invariants 4 and 5 for every live replica."""
        sim = self.sim
        self._judge_losses(p)
        committed = self.committed[p]
        state = sim.controller.states[p]
        if (state.leader_epoch, state.partition_epoch) != self.recorded[p]:
            raise InvariantViolation(2, f"the controller holds p{p} at (leader epoch, partition "
                                        f"epoch) {State.of(state).version}; it recorded "
                                        f"{self.recorded[p]}")  # fmt: skip
        # Candidates that restarted uncleanly may lack records: they lead only if every
        # candidate did.
        clean_candidates = [b for b in state.candidates if b not in state.unclean_logs]
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
            if replica.checked_in and b in clean_candidates and agree < len(committed):
                raise InvariantViolation(4, f"leader candidate {replica!r} lacks committed "
                                            f"record {committed[agree]} at offset {agree} (it "
                                            f"has {_at(log, agree)}; committed point "
                                            f"{len(committed)}, ISR {state.isr}, eligible "
                                            f"{state.elr})")  # fmt: skip
            if agree < min(replica.hw, len(log)):
                raise InvariantViolation(5, f"{replica!r} holds {log[agree]} at offset {agree} "
                                            f"below its high watermark {replica.hw}; "
                                            f"committed there: {committed[agree]}")  # fmt: skip

    def _judge_losses(self, p: int) -> None:
        """Committed records that no disk of ``p`` holds any more (live or not) are lost.
        That is allowed only as physics allows it: every replica that ever held such a
        record lost it in a power failure before flushing it (its last copy on each disk
        went with an unflushed tail, none by a truncation), and never with
        ``flush="every_append"``. The committed log is then cut where the loss begins: its
        offsets may be written again, and the acknowledged records lost are excused."""
        committed = self.committed[p]
        disks = self._disks(p)
        kept = max(_agreement(d, committed) for d in disks)
        if kept == len(committed):
            return
        sim = self.sim
        for offset in range(kept, len(committed)):
            record = committed[offset]
            truncated = [b for b, d in zip(sim.partitions[p], disks)
                         if d.gone.get((offset, record)) == TRUNCATED]  # fmt: skip
            if truncated or sim.cfg.flush == "every_append":
                how = f"truncated by brokers {truncated}" if truncated else "lost"
                raise InvariantViolation("loss", f"p{p}: committed record {record} at offset "
                                                 f"{offset} is on no replica: {how} (flush "
                                                 f"{sim.cfg.flush})")  # fmt: skip
            self.physically_lost.add(record.rid)
        sim.stats["physically_lost"] += len(committed) - kept
        sim.note(f"p{p}: committed records from offset {kept} to {len(committed)} are on no "
                 "replica after power failures")  # fmt: skip
        del committed[kept:]

    def stale_states(self) -> list[str]:
        """Every live replica whose state differs from what the controller recorded (the
        ``convergence`` check after healing)."""
        sim = self.sim
        stale = []
        for p, replicas in sim.partitions.items():
            recorded = State.of(sim.controller.states[p])
            for b in replicas:
                replica = sim.brokers[b].replicas.get(p) if sim.brokers[b].up else None
                if replica is not None and replica.state != recorded:
                    stale.append(f"{replica!r} holds {replica.state}, the controller recorded "
                                 f"{recorded}")  # fmt: skip
        return stale

    def final_check(self, leaders: dict[int, Replica]) -> None:
        """After healing: every acknowledged record once at its offset (unless physics took
        it), no refused one, nothing twice."""
        for p, leader in leaders.items():
            log = leader.disk.log
            ids = [e.rid for e in log]
            if len(set(ids)) != len(ids):
                twice = sorted(rid for rid, n in Counter(ids).items() if n > 1)
                raise InvariantViolation(4, f"p{p}: ids {twice[:5]} are in the final log twice")
            for offset, rid in sorted(self.acked[p].items()):
                if rid in self.physically_lost and rid not in ids:
                    continue
                if _at(log, offset) is None or log[offset].rid != rid:
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
