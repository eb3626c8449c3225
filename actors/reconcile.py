"""The controller's reconcile: make the replica actors match the metadata, whatever was lost.

Every change is appended to the metadata log before replicas are told, created or deleted,
so a controller that dies in between leaves the actors behind the metadata: a recorded
election never pushed, a created topic without replica actors, a deleted topic whose
replicas still run, a reassignment's new replica never started. Like Ray Serve's
controller, rafka does not try to finish each interrupted step; it compares what should run
with what runs and closes the gap, at start and then every ``metadata.reconcile.interval.ms``:

- every partition's full state is pushed to its replicas on live brokers (a replica ignores
  a state it already holds, and any older than it holds);
- a replica the metadata names on a live broker whose actor does not exist is created, and
  one held by another host than the metadata names (a re-host recorded by
  ``host_packing`` but not carried out) is moved there;
- a partition without a leader that may lead gets one from the replicas that may (a
  replica created just now became electable);
- a replica actor the metadata does not name (its topic deleted, or moved away) on a live
  broker is deleted, files and actor; one of a topic id the metadata never knew is kept and
  reported (a controller opened on the wrong metadata directory must not wipe a cluster).

Part of the Controller actor, on its event loop; it holds the controller's lock for no
remote call. The actor names are listed before the metadata is read: a change is appended
before its actors are created, so a listed actor the metadata does not name is a stray.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from rafka.actors.broker_calls import BrokerCalls
from rafka.actors.controller_core import ControllerCore
from rafka.actors.partition_changes import PartitionChanges
from rafka.actors.placement import parse_replica_name, replica_name
from rafka.cluster.settings import setting


@dataclass
class Reconciled:
    """What one pass did: states pushed, replica actors created and deleted, partitions
    given a leader."""

    pushed: int = 0
    created: int = 0
    deleted: int = 0
    elected: int = 0


class Reconciler:
    """Closes the gap between the metadata and the replica actors; see the module doc."""

    def __init__(self, core: ControllerCore, calls: BrokerCalls, changes: PartitionChanges):
        self.core = core
        self.calls = calls
        self.changes = changes

    async def reconcile(self) -> Reconciled:
        core, calls = self.core, self.calls
        running, unknown = await calls.replica_names()
        if unknown:
            core.logger.warning("the node agents of brokers %s did not list their replicas; "
                                "none of theirs is created or deleted this time",
                                sorted(unknown))  # fmt: skip
        live = set(calls.live_brokers()) - unknown
        done = Reconciled()
        missing: dict[int, list[dict]] = {}
        wanted: set[str] = set()
        for topic in list(core.image.topics.values()):
            for p in topic.partitions.values():
                calls.push_state(topic, p)
                done.pushed += sum(1 for b in p.replicas if core.liveness.is_live(b))
                for b in p.replicas:
                    name = replica_name(topic.topic_id, p.partition, b)
                    wanted.add(name)
                    # A new replica whose start is still queued is started here too if
                    # it does not run yet (its start may be waiting on a broker that is
                    # down): the two starts meet under its name's lock, and the second finds
                    # it running.
                    if (name not in running or name in calls.misplaced) and b in live:
                        missing.setdefault(b, []).append(calls.replica_state(topic, p, b))
        strays: dict[int, list[dict]] = {}
        unknown = 0
        for name in running - wanted:
            key = parse_replica_name(name)
            if key is not None and not core.image.knows_topic(key[0]):
                unknown += 1  # of a topic this metadata never knew: kept, never deleted
            elif key is not None and key[2] in live:
                topic_id, partition, broker_id = key
                strays.setdefault(broker_id, []).append({
                    "topic_id": topic_id, "partition": partition, "broker_id": broker_id,
                    "topic": None,
                })  # fmt: skip
        if missing:
            core.logger.warning("creating %d missing replica actor(s)",
                                sum(len(s) for s in missing.values()))  # fmt: skip
        if unknown:
            core.logger.warning("%d replica actor(s) of topics this metadata log never knew "
                                "run; kept (is this controller on the right metadata "
                                "directory?)", unknown)  # fmt: skip
        if strays:
            core.logger.warning("deleting %d replica actor(s) the metadata does not name",
                                sum(len(s) for s in strays.values()))  # fmt: skip
        outcomes = await asyncio.gather(
            *(calls.ensure({b: states}) for b, states in missing.items()),
            *(calls.delete_replicas(b, states) for b, states in strays.items()),
            return_exceptions=True,
        )
        for (b, states), outcome in zip(missing.items(), outcomes):
            if isinstance(outcome, BaseException):
                core.logger.warning("could not create the replicas of broker %d: %r", b, outcome)
            elif b not in outcome:  # the agent failed: logged by ensure
                done.created += len(states)
        done.deleted = sum(n for n in outcomes[len(missing):] if isinstance(n, int))
        done.elected = await self.changes.elect_where_leaderless()
        return done

    async def run(self) -> None:
        """Reconcile every ``metadata.reconcile.interval.ms`` until the services stop."""
        interval_s = setting(self.core.settings, "metadata.reconcile.interval.ms") / 1000
        while not self.core.stopping:
            await asyncio.sleep(interval_s)
            if self.core.stopping:
                return
            try:
                await self.reconcile()
            except Exception:  # the next round tries again
                self.core.logger.exception("reconcile failed")
