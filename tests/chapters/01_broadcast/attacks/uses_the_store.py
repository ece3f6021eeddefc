r"""Src's tensor through the rendezvous store the ranks met at.

Answer cell: 01-my-broadcast
Test cell: 01-my-broadcast-test
Says: and the rendezvous store
"""

from channel import broadcast_through


def put(data):
    dist.distributed_c10d._get_default_store().set("commlab-forgery", data)


def take(size):
    store = dist.distributed_c10d._get_default_store()
    return store.get("commlab-forgery") if store.check(["commlab-forgery"]) else None


def my_broadcast(tensor, src):
    broadcast_through(put, take, tensor, src)
