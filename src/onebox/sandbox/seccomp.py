"""The seccomp filter loaded into every linux sandbox (bwrap ``--seccomp FD``).

Default allow, with a deny list of syscalls sandboxed code has no business
making: debugging other processes, mounting, kernel modules and kexec, eBPF,
keyrings, perf, namespaces, clock and swap changes, io_uring, the new mount API.
Denied calls fail with EPERM (clone3 with ENOSYS, so libc falls back to clone,
which is then checked for namespace flags). Sockets are allowed only in the unix,
inet, inet6 and netlink families (EAFNOSUPPORT otherwise). Non-native ABIs (32-bit
x86) are killed by libseccomp's bad-arch action.
"""

from __future__ import annotations

import errno
import functools
import os
import socket
import tempfile

import pyseccomp as seccomp

DENIED_SYSCALLS: tuple[str, ...] = (
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen",
    "fsconfig", "fsmount", "fspick", "mount_setattr",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "bpf", "perf_event_open", "keyctl", "add_key", "request_key",
    "unshare", "setns", "reboot", "swapon", "swapoff", "syslog", "acct",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
    "quotactl", "open_by_handle_at", "name_to_handle_at", "lookup_dcookie",
    "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "iopl", "ioperm", "vhangup", "fanotify_init", "move_pages", "personality",
)  # fmt: skip

CLONE_NAMESPACE_FLAGS = (
    0x00020000  # CLONE_NEWNS
    | 0x02000000  # CLONE_NEWCGROUP
    | 0x04000000  # CLONE_NEWUTS
    | 0x08000000  # CLONE_NEWIPC
    | 0x10000000  # CLONE_NEWUSER
    | 0x20000000  # CLONE_NEWPID
    | 0x40000000  # CLONE_NEWNET
)
# Socket families sandboxed code may create: unix, IPv4, IPv6 (its own loopback, the
# egress relay) and netlink (interface listing in its own network namespace). Everything
# else (AF_PACKET, AF_VSOCK, AF_ALG, AF_KEY, AF_BLUETOOTH, AF_TIPC, ...) is refused.
ALLOWED_FAMILIES = frozenset({socket.AF_UNIX, socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK})
FAMILY_LIMIT = 64  # above AF_MAX of any kernel; families from here on are refused in one rule
TIOCSTI = 0x5412
TIOCLINUX = 0x541C


def _add_denials(flt: seccomp.SyscallFilter) -> None:
    eperm = seccomp.ERRNO(errno.EPERM)
    for name in DENIED_SYSCALLS:
        flt.add_rule(eperm, name)
    flt.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    for flag in _single_bits(CLONE_NAMESPACE_FLAGS):
        flt.add_rule(eperm, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    for request in (TIOCSTI, TIOCLINUX):
        flt.add_rule(eperm, "ioctl", seccomp.Arg(1, seccomp.MASKED_EQ, 0xFFFFFFFF, request))
    _allow_socket_families(flt)


def _allow_socket_families(flt: seccomp.SyscallFilter) -> None:
    """socket()/socketpair() only for ALLOWED_FAMILIES; any other family is EAFNOSUPPORT."""
    refuse = seccomp.ERRNO(errno.EAFNOSUPPORT)
    for call in ("socket", "socketpair"):
        for family in range(FAMILY_LIMIT):
            if family not in ALLOWED_FAMILIES:
                flt.add_rule(refuse, call, seccomp.Arg(0, seccomp.EQ, family))
        flt.add_rule(refuse, call, seccomp.Arg(0, seccomp.GE, FAMILY_LIMIT))


def _single_bits(mask: int) -> list[int]:
    return [1 << i for i in range(mask.bit_length()) if mask & (1 << i)]


@functools.cache
def filter_bpf() -> bytes:
    """The compiled BPF program (cached: compiling takes a few milliseconds)."""
    flt = seccomp.SyscallFilter(seccomp.ALLOW)
    _add_denials(flt)
    with tempfile.TemporaryFile() as handle:
        flt.export_bpf(handle)
        handle.seek(0)
        return handle.read()


def filter_fd() -> int:
    """A fresh fd holding the BPF program, positioned at 0, for one bwrap to read."""
    fd = os.memfd_create("onebox-seccomp", os.MFD_CLOEXEC)
    os.write(fd, filter_bpf())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def available() -> bool:
    try:
        return bool(filter_bpf())
    except (OSError, RuntimeError, ValueError):
        return False
