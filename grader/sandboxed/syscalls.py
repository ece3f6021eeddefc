"""The system calls a rank may not make once sealed, as a seccomp filter built from Python.

A rank that grades a student's answer shares the sandbox's network with the other ranks (gloo
needs it) and nothing else: :mod:`grader.sandboxed.seal` gives it its own processes, files and
IPC. What could still join two ranks outside the network the grader counts is refused here, by
the kernel, for the rest of the rank's life and its children's:

- sockets other than TCP/IP ones (``AF_UNIX`` sockets, abstract ones included, share a name space
  with every process of the network namespace; ``AF_PACKET`` and raw sockets would read the
  other ranks' traffic) and netlink other than routing (``NETLINK_USERSOCK`` passes messages
  between processes); ``socketpair``;
- changing its own mounts or namespaces (``mount``, ``umount2``, ``unshare``, ``setns``, new
  namespaces through ``clone``): undoing its private ``/tmp`` would show the sandbox's;
- reaching into another process or the kernel's shared state: ``ptrace``,
  ``process_vm_readv``/``writev``, ``kcmp``, ``pidfd_getfd``, key rings, ``perf_event_open``,
  ``bpf``, ``userfaultfd``, and ``io_uring``, whose requests would not pass this filter.

Refused calls fail with ``EPERM`` (``clone3`` with ``ENOSYS``, so that the C library falls back
to ``clone``, which the filter can read). Filters are per architecture: x86-64 and AArch64, the
two that run torch's Linux wheels; anything else makes :func:`install` raise.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import socket
import struct

# seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6] (little-endian low words)
_NR, _ARCH = 0, 4


def _arg(i: int) -> int:
    return 16 + 8 * i


_ARCHES = {
    # machine: (AUDIT_ARCH_*, syscall numbers)
    "x86_64": (0xC000003E, {
        "socket": 41, "socketpair": 53, "clone": 56, "ptrace": 101, "mount": 165,
        "umount2": 166, "pivot_root": 155, "chroot": 161, "add_key": 248, "request_key": 249,
        "keyctl": 250, "unshare": 272, "perf_event_open": 298, "setns": 308,
        "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "bpf": 321,
        "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "open_tree": 428, "move_mount": 429, "fsopen": 430,
        "fsconfig": 431, "fsmount": 432, "fspick": 433, "clone3": 435, "pidfd_getfd": 438,
        "mount_setattr": 442}),
    "aarch64": (0xC00000B7, {
        "socket": 198, "socketpair": 199, "clone": 220, "ptrace": 117, "mount": 40,
        "umount2": 39, "pivot_root": 41, "chroot": 51, "add_key": 217, "request_key": 218,
        "keyctl": 219, "unshare": 97, "perf_event_open": 241, "setns": 268,
        "process_vm_readv": 270, "process_vm_writev": 271, "kcmp": 272, "bpf": 280,
        "userfaultfd": 282, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "open_tree": 428, "move_mount": 429, "fsopen": 430,
        "fsconfig": 431, "fsmount": 432, "fspick": 433, "clone3": 435, "pidfd_getfd": 438,
        "mount_setattr": 442}),
}
_REFUSED = ("socketpair", "ptrace", "mount", "umount2", "pivot_root", "chroot", "add_key",
            "request_key", "keyctl", "unshare", "perf_event_open", "setns",
            "process_vm_readv", "process_vm_writev", "kcmp", "bpf", "userfaultfd",
            "io_uring_setup", "io_uring_enter", "io_uring_register", "open_tree", "move_mount",
            "fsopen", "fsconfig", "fsmount", "fspick", "pidfd_getfd", "mount_setattr")
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET, and CLONE_NEWTIME
_CLONE_NEW = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 \
    | 0x40000000 | 0x00000080
_NETLINK_ROUTE = 0

_LD_W_ABS, _JEQ_K, _JSET_K, _JGE_K, _RET_K = 0x20, 0x15, 0x45, 0x35, 0x06
_ALLOW, _KILL_PROCESS = 0x7FFF0000, 0x80000000
_X32_BIT = 0x40000000


def _errno(code: int) -> int:
    return 0x00050000 | code  # SECCOMP_RET_ERRNO


class _Program:
    """Classic BPF, with forward jumps to named places resolved at the end."""

    def __init__(self) -> None:
        self.code: list[list] = []
        self.labels: dict[str, int] = {}

    def load(self, offset: int) -> None:
        self.code.append([_LD_W_ABS, 0, 0, offset])

    def jump_if(self, op: int, k: int, to: str) -> None:
        """Go to ``to`` if the test holds, else on to the next instruction."""
        self.code.append([op, to, 0, k])

    def ret(self, value: int) -> None:
        self.code.append([_RET_K, 0, 0, value])

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def assemble(self) -> bytes:
        out = b""
        for i, (op, jt, jf, k) in enumerate(self.code):
            if isinstance(jt, str):
                jt = self.labels[jt] - i - 1
            out += struct.pack("HBBI", op, jt, jf, k)
        return out


def program(machine: str | None = None) -> bytes:
    """The filter for ``machine`` (``platform.machine()``), as the kernel reads it."""
    machine = machine or platform.machine()
    if machine not in _ARCHES:
        raise OSError(errno.ENOSYS, f"ranks cannot be sealed on {machine}: the grader knows "
                      "the system calls of x86_64 and aarch64 only")
    arch, nr = _ARCHES[machine]
    p = _Program()
    p.load(_ARCH)
    p.jump_if(_JEQ_K, arch, "native")
    p.ret(_KILL_PROCESS)  # a 32-bit call on a 64-bit kernel: another table of numbers
    p.label("native")
    p.load(_NR)
    p.jump_if(_JGE_K, _X32_BIT, "refuse")
    for name in _REFUSED:
        p.jump_if(_JEQ_K, nr[name], "refuse")
    p.jump_if(_JEQ_K, nr["clone3"], "no_such_call")
    p.jump_if(_JEQ_K, nr["clone"], "clone")
    p.jump_if(_JEQ_K, nr["socket"], "socket")
    p.ret(_ALLOW)
    p.label("clone")  # the flags are the first argument on both architectures
    p.load(_arg(0))
    p.jump_if(_JSET_K, _CLONE_NEW, "refuse")
    p.ret(_ALLOW)
    p.label("socket")
    p.load(_arg(0))
    p.jump_if(_JEQ_K, socket.AF_INET, "allow")
    p.jump_if(_JEQ_K, socket.AF_INET6, "allow")
    p.jump_if(_JEQ_K, socket.AF_NETLINK, "netlink")
    p.ret(_errno(errno.EPERM))
    p.label("netlink")  # getifaddrs, which gloo uses to find the loopback, reads routes
    p.load(_arg(2))
    p.jump_if(_JEQ_K, _NETLINK_ROUTE, "allow")
    p.label("refuse")
    p.ret(_errno(errno.EPERM))
    p.label("no_such_call")
    p.ret(_errno(errno.ENOSYS))
    p.label("allow")
    p.ret(_ALLOW)
    return p.assemble()


_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2


def install() -> None:
    """Load the filter into this process (and every process it starts from now on)."""
    code = program()
    buffer = ctypes.create_string_buffer(code)
    fprog = struct.pack("HxxxxxxQ", len(code) // 8, ctypes.addressof(buffer))
    fprog_buffer = ctypes.create_string_buffer(fprog)
    libc = ctypes.CDLL(None, use_errno=True)
    for args in ((_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0),
                 (_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(fprog_buffer), 0, 0)):
        if libc.prctl(*[ctypes.c_ulong(a) for a in args]) != 0:
            code_ = ctypes.get_errno()
            raise OSError(code_, f"prctl{args[:2]}: {__import__('os').strerror(code_)}")
