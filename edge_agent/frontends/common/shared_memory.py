"""System shared memory (the KServe v2 / Triton extension) at the protocol edge.

A client (``tritonclient.utils.shared_memory``) creates a POSIX shared memory object, registers
it under a name with SystemSharedMemoryRegister (key, offset, byte size), then names the region
in an input's or a requested output's parameters (``shared_memory_region``,
``shared_memory_byte_size``, ``shared_memory_offset``). Inputs are read from the region into a
numpy array; outputs are written into it and the response carries no tensor bytes. The serving
core never learns where the bytes came from.

The agent opens the object for its caller, so it must never open one its caller could not
(a confused deputy, issue 27). grpcio does not tell a server the peer credentials of a Unix
socket connection (no SO_PEERCRED in its auth context; grpc/grpc#15511, #28755), so the caller's
user is not known: the agent takes every user who may connect to the Unix socket (from its
mode, owner and group, the group's members read from the user database) as a possible caller,
and registers an object only when EVERY one of them could open it read-write
(:class:`Callers`). Over TCP, where any local user may call, system shared memory is refused
unless configured (``[grpc] tcp_shared_memory``, ``[http] shared_memory``); those callers are
then taken as the agent's own user, and an object must belong to it. Regions cannot be tied to
the caller that registered them for the same reason: any caller may see and unregister every
region (by decision, docs/security.md "Shared memory regions have no owner": each such caller
could open the object itself); each object owner may hold at most
``[grpc] shared_memory_regions_per_user`` of them.

Hostile input is refused, never followed: a key must name a regular file directly in /dev/shm
(no path, no symlink: ``O_NOFOLLOW`` relative to the directory); offsets and sizes are checked
against the registration and, at every use, against the object's current size. The object is
never mapped: reads and writes go through ``pread``/``pwrite`` on the registered descriptor, so
a client that truncates its object gets an error, not a SIGBUS in the agent. A region
unregistered while a request uses it stays open until that request is done with it, and a later
use gets NOT_FOUND. Regions live in memory only: a restarted agent starts with none.
"""

from __future__ import annotations

import errno
import grp
import math
import os
import pwd
import re
import stat
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edge_agent import bytes_tensors
from edge_agent.errors import AgentError, ErrorCode, InvalidInputError

SHM_DIR = "/dev/shm"
MAX_REGIONS = 64
"""Regions one agent holds at most (each keeps a file descriptor open)."""
MAX_REGIONS_PER_USER = 32
"""Default of ``[grpc] shared_memory_regions_per_user``: regions whose objects one user owns."""
TCP_SETTING = "[grpc] tcp_shared_memory = true"
HTTP_SETTING = "[http] shared_memory = true"
MAX_NAME_CHARS = 256
_KEY = re.compile(r"/?([A-Za-z0-9_.-]{1,255})")

REGION = "shared_memory_region"
BYTE_SIZE = "shared_memory_byte_size"
OFFSET = "shared_memory_offset"


class RegionNotFoundError(AgentError):
    """No shared memory region of that name is registered (or it was unregistered)."""

    code = ErrorCode.NOT_FOUND


class RegionExistsError(AgentError):
    """A region of that name is already registered."""

    code = ErrorCode.ALREADY_EXISTS


class TooManyRegionsError(AgentError):
    """The agent already holds MAX_REGIONS regions, or the object's owner its share."""

    code = ErrorCode.RESOURCE_EXHAUSTED


class SharedMemoryRefusedError(AgentError):
    """System shared memory is not served where the call came from (TCP, unless configured)."""

    code = ErrorCode.FAILED_PRECONDITION


def refused_over_tcp(setting: str) -> SharedMemoryRefusedError:
    """The refusal of system shared memory to a caller whose user is unknown (TCP)."""
    return SharedMemoryRefusedError(
        "system shared memory is not served over TCP: any local user may call there, and the "
        "agent would open objects for callers who cannot open them; use the Unix socket "
        f"(grpc.uds), send tensors in the request, or set {setting} to serve it to every "
        "local user as the agent's own user")


def _rw(info: os.stat_result, uid: int, gids: frozenset[int]) -> bool:
    """Whether user ``uid`` in groups ``gids`` may open an object of ``info`` read-write."""
    if uid == 0:
        return True
    shift = 6 if uid == info.st_uid else 3 if info.st_gid in gids else 0
    return (info.st_mode >> shift) & 0o6 == 0o6


def _groups_of(uid: int) -> frozenset[int]:
    try:
        pw = pwd.getpwuid(uid)
    except KeyError:
        return frozenset()
    return frozenset(os.getgrouplist(pw.pw_name, pw.pw_gid))


def _members(gid: int) -> dict[int, frozenset[int]]:
    """The users of group ``gid`` (primary or listed) with all their groups."""
    try:
        names = set(grp.getgrgid(gid).gr_mem)
    except KeyError:
        names = set()
    return {pw.pw_uid: frozenset(os.getgrouplist(pw.pw_name, pw.pw_gid))
            for pw in pwd.getpwall() if pw.pw_gid == gid or pw.pw_name in names}


@dataclass(frozen=True)
class Callers:
    """Who may be making a call: the users (with their groups) able to connect where it came
    from, or ``anyone``; ``agent_only``: callers taken as the agent's own user (TCP, opted in),
    whose objects must belong to it."""

    users: tuple[tuple[int, frozenset[int]], ...] = ()
    anyone: bool = False
    agent_only: bool = False
    where: str = ""

    @classmethod
    def of_socket(cls, path: Path) -> Callers:
        """Every user who may connect to the Unix socket at ``path`` (its mode now: owner,
        group members, or anyone; root always may)."""
        info = os.stat(path)
        mode = stat.S_IMODE(info.st_mode)
        users: dict[int, frozenset[int]] = {}
        if mode & 0o200:
            users[info.st_uid] = _groups_of(info.st_uid)
        if mode & 0o020:
            users.update(_members(info.st_gid))
        return cls(tuple(sorted(users.items())), anyone=bool(mode & 0o002),
                   where=f"the Unix socket {path} (mode {mode:04o}, group {info.st_gid})")

    @classmethod
    def agent(cls, where: str) -> Callers:
        """Callers taken as the agent's own user (TCP with shared memory configured)."""
        return cls(((os.geteuid(), frozenset(os.getgroups()) | {os.getegid()}),),
                   agent_only=True, where=where)

    def refusal(self, info: os.stat_result) -> str | None:
        """Why an object of ``info`` may not be opened for these callers; None if it may."""
        mode = stat.S_IMODE(info.st_mode)
        owner = f"(owner uid {info.st_uid}, group {info.st_gid}, mode {mode:04o})"
        if self.agent_only and info.st_uid != os.geteuid():
            return (f"belongs to uid {info.st_uid}, not to the agent's user (uid "
                    f"{os.geteuid()}), and callers over {self.where} are taken as the agent's "
                    "user; create it as the agent's user")
        if self.anyone and mode & 0o666 != 0o666:
            return (f"{owner} is not readable and writable by every user, and any local user "
                    f"may call over {self.where}; the agent opens an object only for callers "
                    "who could open it themselves: make it 0666 or the socket 0660")
        denied = [uid for uid, gids in self.users if not _rw(info, uid, gids)]
        if denied:
            return (f"{owner} cannot be opened read-write by uid "
                    f"{', '.join(map(str, denied))}, who may call over {self.where}; the agent "
                    "opens an object only for callers who could open it themselves: give the "
                    "socket's group read-write access to it (0660) or keep that user off the "
                    "socket")
        return None


class Region:
    """One registered region: an open descriptor on the object and the window registered."""

    def __init__(self, name: str, key: str, offset: int, byte_size: int, fd: int,
                 owner: int = -1) -> None:
        self.name = name
        self.key = key
        self.owner = owner  # the object's owner uid (the per-user cap counts by it)
        self.offset = offset
        self.byte_size = byte_size
        self._fd = fd
        self._lock = threading.Lock()
        self._users = 0
        self._removed = False
        self._closer = weakref.finalize(self, os.close, fd)

    @contextmanager
    def open(self) -> Iterator[int]:
        """The descriptor, held open until the block ends even if the region is unregistered
        meanwhile; RegionNotFoundError once it has been."""
        with self._lock:
            if self._removed:
                raise RegionNotFoundError(
                    f"shared memory region '{self.name}' was unregistered while a request "
                    "used it; register it again")
            self._users += 1
        try:
            yield self._fd
        finally:
            with self._lock:
                self._users -= 1
                if self._removed and self._users == 0:
                    self._closer()

    def remove(self) -> None:
        """Unregistered: close now, or when the last request using it is done."""
        with self._lock:
            self._removed = True
            if self._users == 0:
                self._closer()

    def window(self, offset: int, size: int, what: str) -> int:
        """The object offset of ``size`` bytes at ``offset`` in the region, checked to lie
        inside the registration."""
        if offset < 0 or size < 0 or offset + size > self.byte_size:
            raise InvalidInputError(
                f"{what}: {size} bytes at offset {offset} do not fit in shared memory region "
                f"'{self.name}' ({self.byte_size} bytes registered)")
        return self.offset + offset

    def check_current_size(self, fd: int, end: int) -> None:
        """The object still reaches ``end`` (a client may have truncated it)."""
        size = os.fstat(fd).st_size
        if size < end:
            raise InvalidInputError(
                f"shared memory region '{self.name}': the object {self.key!r} is now {size} "
                f"bytes, shorter than the {end} bytes registered; the client truncated it")


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a requested output goes: ``byte_size`` bytes at ``offset`` in ``region``."""

    region: Region
    offset: int
    byte_size: int


class SharedMemoryRegistry:
    """The system shared memory regions registered with one server. Thread-safe."""

    def __init__(self, shm_dir: str = SHM_DIR, max_regions: int = MAX_REGIONS,
                 max_per_user: int = MAX_REGIONS_PER_USER) -> None:
        self._dir = shm_dir
        self._max = max_regions
        self._max_per_user = max_per_user
        self._lock = threading.Lock()
        self._regions: dict[str, Region] = {}

    @property
    def available(self) -> bool:
        """True when this system has a shared memory directory (Linux: /dev/shm)."""
        return os.path.isdir(self._dir)

    # -- the three RPCs ----------------------------------------------------------------
    def register(self, name: str, key: str, offset: int, byte_size: int,
                 callers: Callers) -> Region:
        """Open ``key`` in /dev/shm and register ``byte_size`` bytes of it at ``offset``, when
        every one of ``callers`` could open it read-write."""
        if not name or len(name) > MAX_NAME_CHARS:
            raise InvalidInputError(f"shared memory region name must be 1 to {MAX_NAME_CHARS} "
                                    "characters")
        if byte_size <= 0:
            raise InvalidInputError(f"shared memory region '{name}': byte_size must be > 0")
        fd = self._open(name, key)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise InvalidInputError(f"shared memory region '{name}': key {key!r} is not a "
                                        "shared memory object (not a regular file)")
            refusal = callers.refusal(info)
            if refusal is not None:
                raise InvalidInputError(f"shared memory region '{name}': the object {key!r} "
                                        f"{refusal}")
            if offset + byte_size > info.st_size:
                raise InvalidInputError(
                    f"shared memory region '{name}': {byte_size} bytes at offset {offset} go "
                    f"past the end of {key!r} ({info.st_size} bytes)")
            region = Region(name, key, offset, byte_size, fd, info.st_uid)
        except BaseException:
            os.close(fd)
            raise
        with self._lock:
            if name in self._regions:
                region.remove()
                raise RegionExistsError(f"shared memory region '{name}' is already "
                                        "registered; unregister it first")
            if len(self._regions) >= self._max:
                region.remove()
                raise TooManyRegionsError(
                    f"shared memory region '{name}': this agent already holds {self._max} "
                    "regions; unregister some first")
            held = sum(1 for r in self._regions.values() if r.owner == region.owner)
            if held >= self._max_per_user:
                region.remove()
                raise TooManyRegionsError(
                    f"shared memory region '{name}': uid {region.owner} already owns the "
                    f"objects of {held} regions, the most one user may "
                    "([grpc] shared_memory_regions_per_user); unregister some first")
            self._regions[name] = region
        return region

    def _open(self, name: str, key: str) -> int:
        if not self.available:
            raise InvalidInputError(f"shared memory region '{name}': this system has no "
                                    f"{self._dir}; send tensors in the request")
        match = _KEY.fullmatch(key)
        if match is None or match.group(1) in (".", ".."):
            raise InvalidInputError(
                f"shared memory region '{name}': key {key!r} does not name a shared memory "
                "object (expected '/NAME' of letters, digits, '_', '-', '.')")
        dir_fd = os.open(self._dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            # never open what is not a plain file (a FIFO or a device could act on open)
            mode = os.stat(match.group(1), dir_fd=dir_fd, follow_symlinks=False).st_mode
            if not stat.S_ISREG(mode):
                kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
                raise InvalidInputError(f"shared memory region '{name}': key {key!r} is {kind}, "
                                        "not a shared memory object")
            return os.open(match.group(1), os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
                           | os.O_NONBLOCK, dir_fd=dir_fd)
        except FileNotFoundError:
            raise InvalidInputError(f"shared memory region '{name}': no shared memory object "
                                    f"{key!r} exists") from None
        except OSError as exc:
            reason = "it is a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
            raise InvalidInputError(f"shared memory region '{name}': cannot open {key!r}: "
                                    f"{reason}") from None
        finally:
            os.close(dir_fd)

    def unregister(self, name: str = "") -> None:
        """Drop region ``name`` ("" drops all); an unknown name is not an error (as Triton)."""
        with self._lock:
            if name:
                dropped = [self._regions.pop(name)] if name in self._regions else []
            else:
                dropped, self._regions = list(self._regions.values()), {}
        for region in dropped:
            region.remove()

    def status(self, name: str = "") -> list[Region]:
        """The registered regions, or the one named (RegionNotFoundError if unknown)."""
        with self._lock:
            if name:
                return [self._get(name)]
            return list(self._regions.values())

    def _get(self, name: str) -> Region:
        region = self._regions.get(name)
        if region is None:
            raise RegionNotFoundError(f"shared memory region '{name}' is not registered")
        return region

    def get(self, name: str) -> Region:
        """The region registered as ``name`` (RegionNotFoundError if none)."""
        with self._lock:
            return self._get(name)

    def close(self) -> None:
        """Unregister every region."""
        self.unregister("")

    # -- tensors -----------------------------------------------------------------------
    def read_input(self, ref: tuple[str, int, int], tensor: str, dtype: np.dtype,
                   shape: list[int]) -> np.ndarray:
        """Input ``tensor`` (``shape`` of ``dtype``) read from the region ``ref`` names; an
        object dtype is BYTES, held serialized (each element length-prefixed) in its byte size."""
        name, offset, byte_size = ref
        what = f"input '{tensor}'"
        if dtype.kind == "O":
            self.get(name).window(offset, byte_size, what)  # in bounds before allocating
            raw = self._read(ref, what, np.empty(byte_size, dtype=np.uint8))
            return bytes_tensors.decode(raw.data, shape, tensor)
        expected = math.prod(shape) * dtype.itemsize
        if byte_size != expected:
            raise InvalidInputError(
                f"{what}: shared memory byte size {byte_size} of region '{name}' does not "
                f"match shape {list(shape)} of {dtype} ({expected} bytes)")
        return self._read(ref, what, np.empty(shape, dtype=dtype))

    def _read(self, ref: tuple[str, int, int], what: str, out: np.ndarray) -> np.ndarray:
        """``out`` filled with its size in bytes from the window ``ref`` names."""
        name, offset, byte_size = ref
        expected = out.nbytes
        region = self.get(name)
        start = region.window(offset, byte_size, what)
        with region.open() as fd:
            region.check_current_size(fd, region.offset + region.byte_size)
            got = os.preadv(fd, [out.data.cast("B")], start) if expected else 0
        if got != expected:
            raise InvalidInputError(f"{what}: read {got} of {expected} bytes from shared "
                                    f"memory region '{name}'; the client truncated it")
        return out

    def placement(self, ref: tuple[str, int, int], tensor: str) -> Placement:
        """Check that output ``tensor`` may go where ``ref`` says, before inference runs."""
        name, offset, byte_size = ref
        region = self.get(name)
        region.window(offset, byte_size, f"output '{tensor}'")
        return Placement(region, offset, byte_size)

    @staticmethod
    def write_output(placement: Placement, tensor: str, array: np.ndarray) -> None:
        """Write ``array`` (little-endian, C order; BYTES serialized, each element
        length-prefixed) into its placement."""
        region = placement.region
        if array.dtype.kind in "OSU":
            data = np.frombuffer(bytes_tensors.encode(array, tensor), dtype=np.uint8)
        else:
            data = np.ascontiguousarray(array)
        if data.dtype.byteorder == ">":
            data = data.astype(data.dtype.newbyteorder("<"))
        if data.nbytes > placement.byte_size:
            raise InvalidInputError(
                f"output '{tensor}': {data.nbytes} bytes do not fit in the "
                f"{placement.byte_size} bytes given in shared memory region '{region.name}'")
        start = region.window(placement.offset, data.nbytes, f"output '{tensor}'")
        with region.open() as fd:
            region.check_current_size(fd, region.offset + region.byte_size)
            written = os.pwrite(fd, data.data.cast("B"), start) if data.nbytes else 0
        if written != data.nbytes:
            raise InvalidInputError(f"output '{tensor}': wrote {written} of {data.nbytes} "
                                    f"bytes to shared memory region '{region.name}'")
