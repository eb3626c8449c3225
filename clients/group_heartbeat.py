"""A group member's heartbeat thread.

Part of ``GroupMember`` (``rafka.clients.consumer_group``). Every ``heartbeat_interval_ms``
the thread:

- moves a rebalance on (``advance_rebalance``): a join answer is taken and the sync sent
  (the leader runs the assignor here), a sync answer is kept for the next poll to apply.
  So neither a slow poll loop nor a slow leader holds the group up, as in Kafka, where
  the heartbeat thread handles these answers too;
- heartbeats whenever the member is in a generation (syncing or stable), so a member whose
  poll gap is longer than its session timeout (but within ``max_poll_interval_ms``) is not
  expelled in the middle of a rebalance;
- enforces ``max_poll_interval_ms``: a consumer that has not polled for that long leaves the
  group (a static member does not leave; its session runs out instead), and its partitions
  are reported lost on its next poll.

Listeners never run here: assignments are applied, and revocations made, in the polling thread.
"""

from __future__ import annotations

import logging
import threading

from rafka.clients.group_commits import MEMBER_GONE
from rafka.clients.group_rebalance import JOINING, STABLE, UNJOINED
from rafka.errors import FencedInstanceId, RafkaError, RebalanceInProgress

log = logging.getLogger(__name__)


class HeartbeatMixin:
    """Needs from GroupMember: ``_lock``, ``state``, ``member_id``, ``generation``,
    ``group_id``, ``group_instance_id``, ``heartbeat_interval_s``, ``max_poll_interval_s``,
    ``_last_poll``, ``_clock``, ``_call``, ``_reset``, ``advance_rebalance``, ``_closed``,
    ``_wake`` and ``_heartbeat_thread_enabled``."""

    def _start_heartbeats(self) -> None:
        if self._heartbeats is None and self._heartbeat_thread_enabled:
            self._heartbeats = threading.Thread(
                target=self._heartbeat_loop, name=f"rafka-heartbeat-{self.group_id}",
                daemon=True,
            )  # fmt: skip
            self._heartbeats.start()

    def _heartbeat_loop(self) -> None:
        while not self._closed:
            self._wake.wait(self.heartbeat_interval_s)
            if self._closed:
                return
            try:
                self.heartbeat_once()
            except Exception:  # the thread must outlive any one failure
                log.exception("group %s: heartbeat round failed", self.group_id)

    def heartbeat_once(self) -> None:
        """One round of the thread (tests call it directly)."""
        self.advance_rebalance()
        with self._lock:
            state, member_id, generation = self.state, self.member_id, self.generation
        if not member_id or generation < 0 or state in (UNJOINED, JOINING):
            return
        if self._clock() - self._last_poll > self.max_poll_interval_s:
            self._poll_timeout(member_id)
            return
        try:
            error = self._call("heartbeat", member_id, self.group_instance_id, generation)
        except RafkaError as e:
            error = e
        if error is None:
            return
        with self._lock:
            if self.generation != generation or self.member_id != member_id:
                return  # a newer join overtook this heartbeat
            if isinstance(error, RebalanceInProgress):
                if self.state == STABLE:  # else the member is rejoining already (Kafka too)
                    self._rejoin_needed = True
                return
        if isinstance(error, FencedInstanceId):
            self._fenced(error)
            return
        if isinstance(error, MEMBER_GONE):
            self._reset(error, "heartbeat", member_id, generation)
        else:
            log.info("group %s: heartbeat failed: %s", self.group_id, error)

    def _poll_timeout(self, member_id: str) -> None:
        log.warning(
            "group %s: poll() was not called for more than max_poll_interval_ms=%d; member "
            "%s leaves the group (poll more often, or process fewer records per poll with "
            "max_poll_records)", self.group_id, self.max_poll_interval_s * 1000, member_id,
        )  # fmt: skip
        if self.group_instance_id is None:
            try:
                self._call("leave_group", [(member_id, None)])
            except RafkaError as e:
                log.info("group %s: leaving failed: %s", self.group_id, e)
        with self._lock:
            self._forget_membership(member_id_too=True)
            self._lost = True
