"""A listener's cache of users and ACLs against the controller's security state."""

from rafka.cluster.security_state import SecurityState
from rafka.wire.security_view import SecurityCache


def test_the_first_poll_of_a_new_listener_always_gets_a_snapshot():
    """A controller that never stored a user or an ACL still answers the first poll (the
    cache then allows what no ACL names, instead of denying everything for ever)."""
    state = SecurityState()
    cache = SecurityCache({})
    assert cache.version != state.version
    cache.update(state.snapshot())
    assert cache.authorize("User:ANONYMOUS", "h", 3, 2, "orders")
