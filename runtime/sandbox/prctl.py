"""prctl(2) and capset(2) through ctypes: the few process controls the sandbox
needs (Linux)."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os

PR_SET_PDEATHSIG = 1
PR_CAPBSET_READ = 23
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
CAP_SYS_RESOURCE = 24  # raise hard resource limits, among others
_CAPABILITY_VERSION_3 = 0x20080522  # two 32-bit words per set

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _fail(call: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"{call}: {os.strerror(err)}")


def prctl(option: int, arg: int) -> int:
    result = int(_libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0))
    if result < 0:
        raise _fail(f"prctl({option})")
    return result


def drop_capability(cap: int) -> None:
    """Removes `cap` from the calling thread's effective, permitted and inheritable
    sets (and from the bounding set where we may), for good: threads created later
    inherit the loss. A process without the capability is left as it is."""
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    if _libc.capget(ctypes.byref(header), data) != 0:
        raise _fail("capget")
    word, mask = divmod(cap, 32)
    keep = ~(1 << mask) & 0xFFFFFFFF
    held = data[word].permitted | data[word].effective | data[word].inheritable
    if held & (1 << mask):
        data[word].effective &= keep
        data[word].permitted &= keep
        data[word].inheritable &= keep
        if _libc.capset(ctypes.byref(header), data) != 0:
            raise _fail("capset")
    if prctl(PR_CAPBSET_READ, cap) == 1:
        try:
            prctl(PR_CAPBSET_DROP, cap)
        except OSError as err:  # needs CAP_SETPCAP; no-new-privileges still bars regaining it
            if err.errno != errno.EPERM:
                raise
