"""Which address an API server advertises to the others (runtime/services/session_holders)."""

from __future__ import annotations

from onebox.config import load_settings
from onebox.runtime.services.session_holders import ServerIdentity, identity_for, settled_at


def test_the_operators_address_is_final() -> None:
    me = identity_for(load_settings(api={"advertise_url": "http://10.1.2.3:8420/"}))
    assert me.url == "http://10.1.2.3:8420" and me.settled
    assert settled_at(me, ("127.0.0.1", 9999)) == me


def test_the_first_request_says_the_real_port_and_address() -> None:
    me = identity_for(load_settings(api={"host": "127.0.0.1", "port": 0}))
    assert not me.settled
    settled = settled_at(me, ("127.0.0.1", 41234))
    assert settled.url == "http://127.0.0.1:41234" and settled.settled
    v6 = settled_at(me, ("::1", 41234))
    assert v6.url == "http://[::1]:41234"


def test_a_loopback_request_to_a_wildcard_server_settles_only_the_port() -> None:
    """Other hosts cannot reach 127.0.0.1: a health check over loopback must not make the
    server advertise it."""
    me = ServerIdentity("s", "http://10.0.0.7:8420", "h", settled=False)
    after = settled_at(me, ("127.0.0.1", 8421))
    assert after.url == "http://10.0.0.7:8421" and not after.settled
    assert settled_at(after, ("127.0.0.1", 8421)) == after
    final = settled_at(after, ("10.0.0.7", 8421))
    assert final.url == "http://10.0.0.7:8421" and final.settled


def test_a_holder_of_this_host_whose_process_exited_is_dead_at_once() -> None:
    """Its sessions move now, not after its lease (a restarted `onebox up` on one host)."""
    import os
    import subprocess

    from onebox.runtime.services.session_holders import Holding, checked_here, why_moved

    gone = subprocess.Popen(["true"])
    gone.wait()
    me = ServerIdentity("box:1:a", "http://127.0.0.1:8420", "box")

    def held_by(holder: str) -> Holding:
        return Holding("api-1", "ACTIVE", holder, 0, "http://127.0.0.1:8420", True, 1.0)

    dead = checked_here(held_by(f"box:{gone.pid}:b"), me)
    assert not dead.alive and dead.exited_pid == gone.pid
    assert f"process {gone.pid} on this host has exited" in why_moved(dead, 15)
    for alive in (f"box:{os.getppid()}:c", f"other:{gone.pid}:d", f"box:{os.getpid()}:e"):
        assert checked_here(held_by(alive), me).alive, alive
