"""Which address an API server advertises to the others (runtime/services/session_holders)."""

from __future__ import annotations

import os

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
    import subprocess

    from onebox.processes import process_key
    from onebox.runtime.services.session_holders import Holding, checked_here, why_moved

    gone = subprocess.Popen(["sleep", "30"])
    gone_key = process_key(gone.pid)
    gone.kill()
    gone.wait()
    me = ServerIdentity("box:1:a", "http://127.0.0.1:8420", "box", process=process_key())

    def held_by(process: str | None) -> Holding:
        return Holding("api-1", "ACTIVE", "box:2:b", 0, "http://127.0.0.1:8420", True, 1.0,
                       process)

    dead = checked_here(held_by(gone_key), me)
    assert not dead.alive and dead.exited_pid == gone.pid
    assert f"process {gone.pid} on this host has exited" in why_moved(dead, 15)
    assert checked_here(held_by(process_key(os.getppid())), me).alive


def test_a_pid_alone_never_declares_a_holder_dead_or_alive() -> None:
    """A pid is reused, and another container (same host name, its own pid namespace) has
    pids of its own: the holder is judged by its kernel's name for its process (boot id, pid
    namespace, pid, start time); where that cannot tell, by its heartbeat."""
    from onebox.processes import process_key
    from onebox.runtime.services.session_holders import Holding, checked_here

    me = ServerIdentity("box:1:a", "http://127.0.0.1:8420", "box", process=process_key())
    mine = process_key(os.getppid())
    assert mine is not None
    boot, namespace, pid, started = mine.split("/")

    def held_by(holder: str, process: str | None) -> Holding:
        return Holding("api-1", "ACTIVE", holder, 0, "http://127.0.0.1:8420", True, 1.0,
                       process)

    # a live pid that is another process now (its start time differs): the holder is gone
    reused = checked_here(held_by(f"box:{pid}:b", f"{boot}/{namespace}/{pid}/{int(started) + 1}"),
                          me)
    assert not reused.alive
    # a pid with no process here, but of another pid namespace or boot: its heartbeat says
    for process in (f"{boot}/{int(namespace) + 1}/999999/1", f"other-boot/{namespace}/999999/1",
                    None, "garbage"):
        assert checked_here(held_by("box:999999:c", process), me).alive, process
