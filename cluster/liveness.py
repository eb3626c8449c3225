"""Which brokers are alive, from their heartbeats.

Plain Python with the clock passed in. Ray marks a dead node only after about 16 s, so the
controller keeps its own view: every node agent heartbeats every
``broker.heartbeat.interval.ms``; a broker silent for ``session_timeout_ms`` is a suspect,
and the controller fences it once a direct probe also goes unanswered (the controller gives
silence and probe half of ``broker.session.timeout.ms`` each). A fenced
broker's next heartbeat unfences it. Invariant: a broker is in exactly one of live, suspect
(timed out, probe pending) or fenced.
"""

from __future__ import annotations

BROKER_SESSION_TIMEOUT_MS = 1_000
BROKER_HEARTBEAT_INTERVAL_MS = 200


class BrokerLiveness:
    def __init__(self, session_timeout_ms: int = BROKER_SESSION_TIMEOUT_MS) -> None:
        self.session_timeout_ms = session_timeout_ms
        self.last_heartbeat_ms: dict[int, int] = {}
        self.fenced: set[int] = set()

    def track(self, brokers, now_ms: int) -> None:
        """Start watching ``brokers`` as if each had just sent a heartbeat (a controller
        that (re)starts gives every known broker one session to speak up)."""
        for b in brokers:
            self.last_heartbeat_ms.setdefault(b, now_ms)

    def heartbeat(self, broker: int, now_ms: int) -> bool:
        """Record a heartbeat; True when the broker was fenced and is now live again."""
        self.last_heartbeat_ms[broker] = now_ms
        if broker in self.fenced:
            self.fenced.discard(broker)
            return True
        return False

    def not_listening(self, duration_ms: int, now_ms: int) -> None:
        """The controller could hear nothing for ``duration_ms`` up to ``now_ms`` (its
        process got no CPU: the node is busy starting actors, say): that time does not
        count as any broker's silence, so a controller that was starved never fences a
        broker for it. A heartbeat is never taken as newer than ``now_ms``."""
        for b, t in self.last_heartbeat_ms.items():
            self.last_heartbeat_ms[b] = min(t + duration_ms, now_ms)

    def suspects(self, now_ms: int) -> list[int]:
        """Unfenced brokers whose last heartbeat is older than the session timeout."""
        return sorted(
            b for b, t in self.last_heartbeat_ms.items()
            if b not in self.fenced and now_ms - t > self.session_timeout_ms
        )  # fmt: skip

    def fence(self, broker: int) -> None:
        self.fenced.add(broker)

    def forget(self, broker: int) -> None:
        """Stop watching ``broker`` (it was retired: silence from it is expected)."""
        self.last_heartbeat_ms.pop(broker, None)
        self.fenced.discard(broker)

    def is_live(self, broker: int) -> bool:
        return broker in self.last_heartbeat_ms and broker not in self.fenced

    def live(self) -> set[int]:
        return {b for b in self.last_heartbeat_ms if b not in self.fenced}
