"""The rendezvous store a run's ranks meet at, made so that meeting never waits on a DNS server.

torch's store sockets name each peer for their log messages with a reverse DNS lookup of its
address, whatever the log level. The lookup of ``127.0.0.1`` is answered by ``/etc/hosts``; the
lookup of ``::ffff:127.0.0.1``, the address an IPv6 socket gives the loopback, is not, and goes
to the network's DNS server. Where that server is slow or drops a query, each such lookup costs
the resolver's 5 s timeout: measured with torch 2.13 on a 2-core machine, one run in five to ten
took 5 s longer, every rank waiting in ``init_process_group`` while the store's server named its
peers one after the other. So:

* the store listens on an IPv4 socket on the loopback only (never on every interface, as a
  store made by port alone does): its server names its peers as ``127.0.0.1``, with no lookup
  over the network;
* a client still connects over IPv6 first, and names the store as ``::ffff:127.0.0.1``; for
  that one lookup the ranks, and the thread that makes the store's first client here, resolve
  with one second per attempt (glibc's ``RES_OPTIONS``), unless the notebook's environment sets
  ``RES_OPTIONS`` itself.
"""

from __future__ import annotations

import os
import socket
import threading
from datetime import timedelta
from typing import Any

import torch

QUICK_LOOKUPS = "timeout:1 attempts:2"


def resolver_options() -> str:
    """The ``RES_OPTIONS`` a rank gets: the notebook's own, else :data:`QUICK_LOOKUPS`."""
    return os.environ.get("RES_OPTIONS", QUICK_LOOKUPS)


def launch_store(timeout: float, address: str = "127.0.0.1") -> Any:
    """A new store, served from this process on a port the operating system picks, at
    ``address`` (the loopback unless a grader gives its ranks networks of their own).

    glibc reads ``RES_OPTIONS`` when a thread first resolves a name: the store, and with it its
    first client, is made in a new thread while the variable is set; the notebook's own
    environment is left as it was.
    """
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind((address, 0))
        listener.listen(128)
    except OSError:
        listener.close()
        raise
    port, made = listener.getsockname()[1], {}

    def make() -> None:
        try:
            made["store"] = torch.distributed.TCPStore(
                address, port, None, True, timedelta(seconds=timeout),
                wait_for_workers=False, master_listen_fd=listener.fileno())
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            made["error"] = exc

    had = os.environ.get("RES_OPTIONS")
    os.environ.setdefault("RES_OPTIONS", QUICK_LOOKUPS)
    try:
        maker = threading.Thread(target=make, name="commlab-store")
        maker.start()
        maker.join()
    finally:
        if had is None:
            del os.environ["RES_OPTIONS"]
    if "error" in made:
        listener.close()
        raise made["error"]
    listener.detach()  # the store's server owns the socket now, and closes it with the store
    return made["store"]


def loopback_interface() -> str | None:
    """The name of this machine's loopback interface (gloo's GLOO_SOCKET_IFNAME for ranks that
    talk over it alone), or None where there is none to name."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return None
    return next((n for n in ("lo", "lo0") if n in names), None)
