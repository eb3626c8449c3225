"""Member ids handed out before a join (KIP-394): Kafka's JoinGroup v4+ answers a dynamic
member's first join with MEMBER_ID_REQUIRED and the id it must join with, so a client that
retries a first join whose answer it lost leaves no member behind.

``MemberIdHandout`` is mixed into ``rafka.cluster.group.Group``. The ids handed out are kept
in memory only, each until its member's session timeout runs out, as in Kafka: after a
coordinator restart a client naming one gets UNKNOWN_MEMBER_ID and joins again from an empty
id. They count toward group.max.size with the members.
"""

from __future__ import annotations

from rafka.errors import GroupMaxSizeReached, MemberIdRequired


class MemberIdHandout:
    """Needs ``group_id``, ``config`` (group.max.size) and ``members`` of the Group."""

    def _init_member_id_handout(self) -> None:
        self._handed_out: dict[str, int] = {}  # member id -> until when (ms) a join may name it

    def _forget_expired_member_ids(self, now: int) -> None:
        self._handed_out = {m: until for m, until in self._handed_out.items() if until > now}

    def _check_room(self) -> None:
        """GroupMaxSizeReached when the members and the ids handed out fill group.max.size."""
        taken = len(self.members) + len(self._handed_out)
        if taken >= self.config.max_size:
            raise GroupMaxSizeReached(
                f"group {self.group_id} has {len(self.members)} members and "
                f"{len(self._handed_out)} joining, the most group.max.size="
                f"{self.config.max_size} allows"
            )

    def _hand_out(self, member_id: str, session_timeout_ms: int, now: int) -> None:
        """Raise MemberIdRequired carrying ``member_id``, which a join may name until the
        session timeout has passed."""
        self._handed_out[member_id] = now + session_timeout_ms
        raise MemberIdRequired(
            f"group {self.group_id}: join again with member id {member_id}", member_id
        )

    def _take_handed_out(self, member_id: str) -> bool:
        """Whether ``member_id`` was handed out (and still may join); it may not again."""
        return self._handed_out.pop(member_id, None) is not None
