"""Deny a process IP networking: a seccomp filter that makes ``socket()`` fail with EACCES for
every address family but AF_UNIX (and ``io_uring_setup``, which could open sockets too).

The serving processes of ``aggregator serve`` (:mod:`aggregator.serve.worker`) install it
before they open anything and before any thread starts; they only accept connections on the
listening socket they inherit. So the query engine cannot reach the network even if a
``SERVICE`` clause got past :mod:`aggregator.serve.sparql_guard`. Unprivileged
(``PR_SET_NO_NEW_PRIVS`` first), Linux on x86-64 and aarch64 only; elsewhere
:func:`deny_network` returns False and the guard alone applies. Filters are inherited by
threads created afterwards and by child processes.
"""

from __future__ import annotations

import ctypes
import platform
import struct
import sys

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_RET_ALLOW = 0x7FFF0000
_RET_EACCES = 0x00050000 | 13
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_RET_K = 0x06
_AF_UNIX = 1
_X32_BIT = 0x40000000
_IO_URING_SETUP = 425  # the same number on both architectures

# machine -> (AUDIT_ARCH value, socket syscall number)
_ARCHES = {
    "x86_64": (0xC000003E, 41),
    "aarch64": (0xC00000B7, 198),
}


def _ins(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def _program(arch: int, socket_nr: int) -> bytes:
    # struct seccomp_data: int nr (offset 0); u32 arch (4); u64 ip (8); u64 args[6] (16...)
    return b"".join(
        [
            _ins(_LD_W_ABS, 4),  # 0: A = arch
            _ins(_JEQ_K, arch, 0, 6),  # 1: other arch -> allow (8)
            _ins(_LD_W_ABS, 0),  # 2: A = syscall number
            _ins(_JGE_K, _X32_BIT, 5, 0),  # 3: x32 ABI -> deny (9)
            _ins(_JEQ_K, socket_nr, 1, 0),  # 4: socket -> check family (6)
            _ins(_JEQ_K, _IO_URING_SETUP, 3, 2),  # 5: io_uring -> deny (9), else allow (8)
            _ins(_LD_W_ABS, 16),  # 6: A = args[0] (domain; low half, little-endian)
            _ins(_JEQ_K, _AF_UNIX, 0, 1),  # 7: AF_UNIX -> allow (8), else deny (9)
            _ins(_RET_K, _RET_ALLOW),  # 8
            _ins(_RET_K, _RET_EACCES),  # 9
        ]
    )


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def deny_network() -> bool:
    """Install the filter in this process; True when it is in force."""
    arch = _ARCHES.get(platform.machine())
    if not sys.platform.startswith("linux") or arch is None:
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    code = _program(*arch)
    buf = ctypes.create_string_buffer(code, len(code))
    prog = _SockFprog(len(code) // 8, ctypes.addressof(buf))
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False
    return bool(libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) == 0)
