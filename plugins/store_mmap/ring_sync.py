"""``fdatasync`` through the kernel's io_uring, waited for without a thread of ours.

Why: a sync-flush put waits for one ``fdatasync`` (about 0.1 ms here). Through the store's
flush thread (:mod:`.flush_thread`) the loop hands the call to a Python thread and takes it
back: two futex wake-ups and two GIL hand-overs, 35-45 µs and 30 µs of CPU a flush on this
machine kind (a loop of 300 B ``pwrite`` + sync: 134-139 µs at the median through the thread,
93-95 µs inline, 100 µs here). With io_uring the loop submits an ``IORING_OP_FSYNC`` and waits
in the same ``io_uring_enter`` call; the kernel runs the sync on its own worker, and no
Python runs anywhere else meanwhile. A caller with work for that time (the broker's
:class:`~kernel.sync_overlap.SyncOverlap`: the views' dispatch of what was just appended)
submits, runs it on the loop while the worker syncs, then waits: one more system call.

The waiting policy is the flush thread's, for the same promise: the loop blocks (GIL
released) for at most :data:`~.flush_thread.BLOCK_LIMIT`, then waits for the completion
asynchronously through an eventfd in trio's epoll set, so a stalled disk holds the loop once
for the limit, never for the stall; while recent syncs run slow it does not block at all,
nor for a sync no put waits for (:data:`~kernel.unawaited_flush.FLUSH_UNAWAITED`: an interval
flush, whose block only held back the requests arriving meanwhile).

How the loop blocks (``[store_mmap] sync_wait``): by default it spins, looking at the
completion queue's tail in the shared mapping and yielding its CPU (``sched_yield``, the GIL
released) between looks, rather than sleeping in ``io_uring_enter``. A thread asleep for the
sync leaves its virtual CPU halted; waking it costs tens of microseconds, and the broker's code
after the wake ran slower too (a lone sync put's cycle, both ends timed: the spin took one send
in flight 8 % faster, batches of 32 11 %, the p99 18 % lower, for 7-14 % more broker CPU;
docs/performance.md, twenty-fourth step). The yield lets the kernel's worker, which runs the
sync, have the CPU whenever it is runnable. It spins only for a put its front end marks alone
(:data:`~kernel.put_alone.PUT_ALONE`: one connection sending, nothing else of it in flight):
with other connections' puts coming (64 producers, 64 sends in flight on one connection, the
flush loop's own flushes) the spin bought no rate and cost the broker 5-8 % of its CPU, which
the clients on the same machine want (docs/performance.md, thirty-first step). ``sleep`` keeps
the system-call wait for every put.

The binding is the system-call interface itself (``io_uring_setup``, ``io_uring_enter``,
``io_uring_register`` through ``ctypes``, which releases the GIL around each call; the rings
mapped with :mod:`mmap`): no compiled extension to build, nothing beyond the C library. It is
used on x86-64 only, whose memory ordering makes plain loads and stores of the ring indexes
correct; elsewhere, or where the kernel or a seccomp policy refuses io_uring, :func:`open_ring`
says why and the store keeps the flush thread.

One operation is in flight at a time (a :class:`trio.Lock`): the store's flush, its only user,
runs under the store's flush lock anyway. An operation may also be *started* (:meth:`Ring.start`:
submitted, not waited for) while the ring is idle, and waited for later (:meth:`Ring.finish`):
a lone sync put's leader starts its sync as soon as it knows it will flush, so the disk works
while the loop walks from the flush policy to the ring (about 50 µs of Python on this machine
kind: docs/performance.md, thirty-fifth step). Any :meth:`Ring.run` meanwhile first waits for
the started operation, so there is still one in flight at a time.

A completion the kernel put in its overflow list instead of the completion queue (seen on
Linux 6.18 with the queue empty; see :meth:`Ring._flush_overflow`) is fetched wherever the
ring looks for its operation, and an asynchronous wait looks again every
:data:`EVENT_RECHECK` even when the eventfd stays silent; one the kernel counts as dropped
fails its operation with EIO (the store turns read-only). No completion is waited for in vain.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import mmap
import os
import platform
import struct
import time
from collections.abc import Callable

import attrs
import trio

from kernel.context import StashKey
from kernel.put_alone import PUT_ALONE
from kernel.unawaited_flush import FLUSH_UNAWAITED
from plugins.store_mmap.flush_thread import BLOCK_LIMIT, BlockingWaits

_SYS_IO_URING_SETUP = 425
_SYS_IO_URING_ENTER = 426
_SYS_IO_URING_REGISTER = 427
_OFF_SQ_RING = 0
_OFF_CQ_RING = 0x8000000
_OFF_SQES = 0x10000000
_FEAT_SINGLE_MMAP = 1 << 0
_FEAT_EXT_ARG = 1 << 8
_ENTER_GETEVENTS = 1 << 0
_SQ_CQ_OVERFLOW = 1 << 1
"""``IORING_SQ_CQ_OVERFLOW`` in the submission ring's flags: completions wait in the kernel's
overflow list, which only an ``io_uring_enter`` with ``IORING_ENTER_GETEVENTS`` moves into the
completion ring (and only then is the eventfd signalled for them)."""
_ENTER_EXT_ARG = 1 << 3
_REGISTER_EVENTFD = 4
_OP_NOP = 0
_OP_FSYNC = 3
_OP_TIMEOUT = 11
_FSYNC_DATASYNC = 1
_SQE_SIZE = 64
_CQE_SIZE = 16
_ENTRIES = 8

_PARAMS = struct.Struct("<7I12x7I12x6I16x")
"""``struct io_uring_params`` (120 bytes): sq_entries, cq_entries, flags, sq_thread_cpu,
sq_thread_idle, features, wq_fd, resv[3]; then ``io_sqring_offsets`` (head, tail, ring_mask,
ring_entries, flags, dropped, array, resv1, user_addr) and ``io_cqring_offsets`` (head, tail,
ring_mask, ring_entries, overflow, cqes, flags, resv1, user_addr)."""
_SQE = struct.Struct("<BBHiQQIIQ24x")
"""``struct io_uring_sqe``: opcode, flags, ioprio, fd, off, addr, len, op flags, user_data."""
_CQE = struct.Struct("<Qi4x")
"""``struct io_uring_cqe``: user_data, res (flags unused)."""
_U32 = struct.Struct("<I")

_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_ARG_SIZE = ctypes.c_size_t(24)
_BLOCKING_WAIT = _ENTER_GETEVENTS | _ENTER_EXT_ARG
EVENT_RECHECK = 0.05
"""Seconds an asynchronous wait sleeps on the eventfd before it looks at the rings again: a
completion the eventfd never announces (one left in the overflow list) is found within this."""

log = logging.getLogger(__name__)


def _call(number: int, *args: object) -> int:
    """``syscall(number, args...)`` with every integer as wide as a register: ``syscall`` is
    variadic, and an ``int`` passed there leaves the upper half of its register undefined,
    which the kernel reads for a ``size_t`` (seen: EINVAL from ``io_uring_enter``'s
    ``argsz`` inside trio, fine outside it)."""
    wide = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    return int(_syscall(ctypes.c_long(number), *wide))


class _GetEventsArg(ctypes.Structure):
    """``struct io_uring_getevents_arg``: how long ``io_uring_enter`` may wait."""

    _fields_ = [
        ("sigmask", ctypes.c_uint64),
        ("sigmask_sz", ctypes.c_uint32),
        ("min_wait_usec", ctypes.c_uint32),
        ("ts", ctypes.c_uint64),
    ]


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_int64), ("tv_nsec", ctypes.c_int64)]


class RingUnavailable(OSError):
    """io_uring cannot be used here (the reason is the message)."""


@attrs.frozen
class RingOp:
    """One submission: what :meth:`Ring.run` sends to the kernel."""

    opcode: int
    fd: int = -1
    op_flags: int = 0
    address: int = 0
    length: int = 0
    keep: object = None
    """What ``address`` points into, kept alive with the operation."""

    @classmethod
    def datasync(cls, fd: int) -> RingOp:
        """``fdatasync(fd)``: the whole file's data and the metadata needed to read it."""
        return cls(_OP_FSYNC, fd, _FSYNC_DATASYNC)

    @classmethod
    def nop(cls) -> RingOp:
        return cls(_OP_NOP)

    @classmethod
    def sleep(cls, seconds: float) -> RingOp:
        """A timeout that completes (``ETIME``) after ``seconds``: an operation as slow as a
        stalled disk's sync, for tests of the waiting."""
        whole = int(seconds)
        timespec = _Timespec(whole, int((seconds - whole) * 1e9))
        return cls(_OP_TIMEOUT, address=ctypes.addressof(timespec), length=1, keep=timespec)


@attrs.frozen
class _Started:
    """An operation :meth:`Ring.start` put in the queue."""

    user_data: int
    at: float
    """When it was submitted (``perf_counter``): its wait counts from here."""
    submitted: bool
    """False when the kernel refused the submission for the moment (EAGAIN, EBUSY, EINTR):
    the entry is still queued, and the next submission sends it."""


def _checked(result: int) -> int:
    """A completion's result, or its errno raised."""
    if result < 0:
        raise OSError(-result, os.strerror(-result))
    return result


class Ring:
    """An io_uring instance owned by one trio loop; see the module docstring."""

    def __init__(self, ring_fd: int, params: tuple[int, ...], *, spin: bool = True) -> None:
        self._fd = ring_fd
        self.spin = spin
        """Block by spinning on the completion queue (else asleep in ``io_uring_enter``)."""
        sq_entries, cq_entries, features = params[0], params[1], params[5]
        _, sq_tail, sq_mask, _, sq_flags, _, sq_array = params[7:14]
        cq_head, cq_tail, cq_mask, _, cq_dropped, cqes = params[14:20]
        if not features & _FEAT_EXT_ARG:
            raise RingUnavailable(errno.ENOSYS, "the kernel's io_uring has no wait timeout (before 5.11)")
        sq_size = sq_array + sq_entries * 4
        cq_size = cqes + cq_entries * _CQE_SIZE
        shared = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        protection = mmap.PROT_READ | mmap.PROT_WRITE
        if features & _FEAT_SINGLE_MMAP:
            self._sq = self._cq = mmap.mmap(ring_fd, max(sq_size, cq_size), shared, protection)
        else:
            self._sq = mmap.mmap(ring_fd, sq_size, shared, protection, offset=_OFF_SQ_RING)
            self._cq = mmap.mmap(ring_fd, cq_size, shared, protection, offset=_OFF_CQ_RING)
        self._sqes = mmap.mmap(ring_fd, sq_entries * _SQE_SIZE, shared, protection, offset=_OFF_SQES)
        self._sq_tail, self._sq_array, self._sq_flags = sq_tail, sq_array, sq_flags
        self._sq_mask = _U32.unpack_from(self._sq, sq_mask)[0]
        self._cq_head, self._cq_tail, self._cqes = cq_head, cq_tail, cqes
        self._cq_mask = _U32.unpack_from(self._cq, cq_mask)[0]
        self._cq_dropped = cq_dropped
        self._dropped_seen = _U32.unpack_from(self._cq, cq_dropped)[0]
        self._event = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        registered = ctypes.c_int32(self._event)
        if _call(_SYS_IO_URING_REGISTER, ring_fd, _REGISTER_EVENTFD, ctypes.byref(registered), 1) < 0:
            code = ctypes.get_errno()
            self._close_maps()
            os.close(self._event)
            raise RingUnavailable(code, f"io_uring_register(EVENTFD): {os.strerror(code)}")
        self._timeout = _Timespec(0, int(BLOCK_LIMIT * 1e9))
        self._wait = _GetEventsArg(0, 0, 0, ctypes.addressof(self._timeout))
        self._wait_ref = ctypes.byref(self._wait)
        self._lock = trio.Lock()
        self._next_id = 1
        self.waits = BlockingWaits()
        """How operations were waited for (the flush thread's policy and counts)."""
        self._started: _Started | None = None
        """The operation :meth:`start` submitted, until :meth:`finish` or :meth:`run` waits for it."""
        self._settled: tuple[int, int] | None = None
        """A started operation :meth:`run` waited for before its own: (token, result)."""
        self.started_early = 0
        """Operations submitted by :meth:`start` (the figure ``commitLogSyncsStartedEarly``)."""
        self.overflow_flushes = 0
        """Times a completion was fetched from the kernel's overflow list
        (``commitLogSyncOverflowFlushes``; see :meth:`_flush_overflow`)."""

    async def datasync(self, fd: int, meanwhile: Callable[[], object] | None = None) -> None:
        """``fdatasync(fd)``; not cancellable once submitted (the caller's flushed position
        depends on it having finished), as the flush thread's calls. ``meanwhile``: see
        :meth:`run`.

        :raises OSError: the sync's error (EIO, ENOSPC, EBADF ...).
        """
        await self.run(RingOp.datasync(fd), meanwhile)

    async def run(self, op: RingOp, meanwhile: Callable[[], object] | None = None) -> int:
        """Submit ``op`` and wait for its completion; its non-negative result. When the loop
        is to block for it, ``meanwhile`` (synchronous, bounded, never raising: the
        :class:`~kernel.sync_overlap.SyncOverlap` work) runs between the submission and the
        wait, while the kernel's worker does the operation: one more ``io_uring_enter``. An
        operation :meth:`start` submitted and nobody finished yet is waited for first (its
        result kept for :meth:`finish`).

        :raises OSError: with the completion's errno when it is negative.
        """
        lock = self._lock
        if lock.locked():
            with trio.CancelScope(shield=True):
                await lock.acquire()
        else:
            lock.acquire_nowait()  # no scheduler pass on a lone flush's way to the disk
        try:
            return await self._run_locked(op, meanwhile)
        finally:
            lock.release()

    def start(self, op: RingOp) -> int | None:
        """Submit ``op`` without waiting for it; its token for :meth:`finish`, which waits.
        None, with nothing submitted, while an operation is in flight or started, or when the
        ring is closed: the caller then runs the operation as usual. Never raises: a refusal
        by the kernel leaves the entry queued for :meth:`finish` (or the next :meth:`run`) to
        submit, with the error reported there."""
        if self._fd < 0 or self._lock.locked() or self._started is not None:
            return None
        user_data = self._queue(op)
        submitted = _call(_SYS_IO_URING_ENTER, self._fd, 1, 0, 0, self._wait_ref, _ARG_SIZE) >= 0
        self._started = _Started(user_data, time.perf_counter(), submitted)
        self.started_early += 1
        return user_data

    async def finish(self, token: int, meanwhile: Callable[[], object] | None = None) -> int:
        """Wait for the operation :meth:`start` returned ``token`` for, as :meth:`run` waits
        (``meanwhile`` runs while the kernel works, when the loop is to block for it); its
        non-negative result.

        :raises OSError: with the completion's errno when it is negative; EBADF when the ring
            closed before it completed.
        :raises ValueError: ``token`` is not a started operation's (or was waited for already).
        """
        lock = self._lock
        if lock.locked():
            with trio.CancelScope(shield=True):
                await lock.acquire()
        else:
            lock.acquire_nowait()
        try:
            if self._fd < 0:
                # Closed, whatever became of the operation (a failed submission closes it).
                self._started = None
                raise OSError(errno.EBADF, "the io_uring is closed")
            started = self._started
            if started is not None and started.user_data == token:
                self._started = None
                return await self._complete(token, started.at, meanwhile, submitted=started.submitted)
            settled = self._settled
            if settled is None or settled[0] != token:
                raise ValueError(f"no started operation {token} to finish")
            self._settled = None
            return _checked(settled[1])
        finally:
            lock.release()

    async def _run_locked(self, op: RingOp, meanwhile: Callable[[], object] | None) -> int:
        if self._fd < 0:
            raise OSError(errno.EBADF, "the io_uring is closed")
        await self._settle_started()
        user_data = self._queue(op)
        return await self._complete(user_data, time.perf_counter(), meanwhile, submitted=False)

    def _queue(self, op: RingOp) -> int:
        """Put ``op`` in the submission queue (not yet submitted); its user data."""
        user_data = self._next_id
        self._next_id += 1
        tail = _U32.unpack_from(self._sq, self._sq_tail)[0]
        index = tail & self._sq_mask
        _SQE.pack_into(
            self._sqes, index * _SQE_SIZE,
            op.opcode, 0, 0, op.fd, 0, op.address, op.length, op.op_flags, user_data,
        )  # fmt: skip
        _U32.pack_into(self._sq, self._sq_array + index * 4, index)
        _U32.pack_into(self._sq, self._sq_tail, (tail + 1) & 0xFFFFFFFF)
        return user_data

    async def _settle_started(self) -> None:
        """Wait (without blocking the loop) for a started operation nobody finished yet and
        keep its result for :meth:`finish`: it completes before the next is submitted."""
        started = self._started
        if started is None:
            return
        self._started = None
        if not started.submitted:
            await self._submit(0)
        result = self._reap(started.user_data)
        while result is None:
            result = await self._await_event(started.user_data)
        self._settled = (started.user_data, result)

    async def _complete(
        self, user_data: int, started: float, meanwhile: Callable[[], object] | None, *, submitted: bool
    ) -> int:
        """Submit ``user_data``'s queued entry unless ``submitted``, and wait for it: blocking
        (spinning or in the system call) within the limit when the policy allows, running
        ``meanwhile`` first; else, or after the limit, asynchronously through the eventfd."""
        block = self.waits.may_block() and not FLUSH_UNAWAITED.get()
        spin = self.spin and PUT_ALONE.get()
        if block and (meanwhile is not None or spin or submitted):
            if not submitted:
                await self._submit(0)
            if meanwhile is not None:
                meanwhile()
            if spin:
                self._spin_until_completed(started + BLOCK_LIMIT)
            else:
                # A failure here (ETIME: slower than the limit; EINTR) leaves the completion
                # to the eventfd wait below.
                _call(_SYS_IO_URING_ENTER, self._fd, 0, 1, _BLOCKING_WAIT, self._wait_ref, _ARG_SIZE)
        elif not submitted:
            await self._submit(_BLOCKING_WAIT if block else 0)
        result = self._reap(user_data)
        blocked = block and result is not None
        while result is None:
            result = await self._await_event(user_data)
        self.waits.count(time.perf_counter() - started, blocked=blocked)
        return _checked(result)

    async def _await_event(self, user_data: int) -> int | None:
        """One wait for the ring's eventfd, at most :data:`EVENT_RECHECK` (shielded: a submitted
        operation cannot be abandoned), then ``user_data``'s result if it completed."""
        with trio.CancelScope(shield=True, deadline=trio.current_time() + EVENT_RECHECK):
            await trio.lowlevel.wait_readable(self._event)
        try:
            os.eventfd_read(self._event)
        except BlockingIOError:
            pass
        return self._reap(user_data)

    async def _submit(self, flags: int) -> None:
        """Submit the queued entry; with ``flags`` :data:`_BLOCKING_WAIT` also wait for one
        completion, at most the block limit (the GIL released meanwhile)."""
        waits = 1 if flags else 0
        while True:
            if _call(_SYS_IO_URING_ENTER, self._fd, 1, waits, flags, self._wait_ref, _ARG_SIZE) >= 0:
                return
            code = ctypes.get_errno()
            if code not in (errno.EINTR, errno.EAGAIN, errno.EBUSY):
                # The entry stays queued unsubmitted and would be the next call's: the ring
                # is unusable from here (every later call: EBADF, the store read-only).
                self.close()
                raise OSError(code, f"io_uring_enter: {os.strerror(code)}")
            if code == errno.EBUSY and self._overflowed():
                self._flush_overflow()  # completions in the overflow list hold submissions back
            elif code != errno.EINTR:
                with trio.CancelScope(shield=True):
                    await trio.sleep(0.0001)  # the kernel is short of memory for a moment

    def _spin_until_completed(self, limit: float) -> None:
        """Look at the completion queue until it holds a completion or ``limit`` (a
        ``perf_counter`` time) passes, yielding the CPU between looks (see the module
        docstring). One operation is in flight, so any completion is likely its."""
        cq, head_at, tail_at = self._cq, self._cq_head, self._cq_tail
        sq, flags_at = self._sq, self._sq_flags
        unpack = _U32.unpack_from
        while (
            unpack(cq, head_at)[0] == unpack(cq, tail_at)[0]
            and not unpack(sq, flags_at)[0] & _SQ_CQ_OVERFLOW
            and time.perf_counter() < limit
        ):
            os.sched_yield()

    def _reap(self, user_data: int) -> int | None:
        """The result of ``user_data`` if it completed (every completion up to it is consumed:
        one operation is in flight at a time), fetched from the kernel's overflow list when it
        was put there; ``-EIO`` when the kernel counts a completion dropped."""
        found = self._reap_ring(user_data)
        if found is not None:
            return found
        if self._overflowed():
            self._flush_overflow()
            found = self._reap_ring(user_data)
            if found is not None:
                return found
        dropped = _U32.unpack_from(self._cq, self._cq_dropped)[0]
        if dropped == self._dropped_seen:
            return None
        # The kernel dropped a completion (no memory for its overflow entry): with one operation
        # in flight it was this one, whose outcome is now unknown. Failing it (the store turns
        # read-only) beats waiting for it for good.
        self._dropped_seen = dropped
        log.error("the kernel dropped the completion of io_uring operation %d: failed as EIO", user_data)
        return -errno.EIO

    def _overflowed(self) -> bool:
        return bool(_U32.unpack_from(self._sq, self._sq_flags)[0] & _SQ_CQ_OVERFLOW)

    def _flush_overflow(self) -> None:
        """Have the kernel move completions from its overflow list into the completion ring
        (``io_uring_enter`` with ``IORING_ENTER_GETEVENTS``, waiting for none).

        Why: one operation is in flight at a time, so the 16-entry completion ring is never
        full on this side; yet a broker under sync flush on Linux 6.18 had the sync it waited
        for in the overflow list, its completion ring empty (``/proc/<pid>/fdinfo``:
        ``CqHead`` = ``CqTail`` = 15744, ``CqOverflowList: user_data=15745, res=0``). The
        eventfd is not signalled for such a completion, and the broker waited for it for good:
        sends unanswered, a stop that never ended (docs/performance.md, thirty-sixth step)."""
        if _call(_SYS_IO_URING_ENTER, self._fd, 0, 0, _ENTER_GETEVENTS, None, 0) < 0:
            code = ctypes.get_errno()
            log.error("io_uring_enter(GETEVENTS) to fetch overflowed completions: %s", os.strerror(code))
            return
        self.overflow_flushes += 1
        if self.overflow_flushes == 1:
            log.warning(
                "the io_uring's completion of a commit-log sync was in the kernel's overflow list; "
                "fetched (counted in commitLogSyncOverflowFlushes)"
            )

    def _reap_ring(self, user_data: int) -> int | None:
        """``user_data``'s result if its completion is in the completion ring, every
        completion there consumed."""
        head = _U32.unpack_from(self._cq, self._cq_head)[0]
        tail = _U32.unpack_from(self._cq, self._cq_tail)[0]
        found = None
        while head != tail:
            got, result = _CQE.unpack_from(self._cq, self._cqes + (head & self._cq_mask) * _CQE_SIZE)
            head = (head + 1) & 0xFFFFFFFF
            if got == user_data:
                found = result
        _U32.pack_into(self._cq, self._cq_head, head)
        return found

    def figures(self) -> dict[str, str]:
        """The broker runtime figures (``brokerStatus``) of the commit log's syncs."""
        return {
            "commitLogSyncsBlocked": str(self.waits.blocked),
            "commitLogSyncsAwaited": str(self.waits.awaited),
            "commitLogSyncsStartedEarly": str(self.started_early),
            "commitLogSyncOverflowFlushes": str(self.overflow_flushes),
            "commitLogSyncWait": "spin" if self.spin else "sleep",
        }

    def close(self) -> None:
        if self._fd < 0:
            return
        self._close_maps()
        os.close(self._event)
        os.close(self._fd)
        self._fd = -1

    def _close_maps(self) -> None:
        for mapping in {id(m): m for m in (self._sq, self._cq, self._sqes)}.values():
            mapping.close()


def open_ring(*, spin: bool = True) -> Ring:
    """A ring for syncs; ``spin``: how the loop blocks for an operation (:attr:`Ring.spin`).

    :raises RingUnavailable: naming why (not x86-64, the kernel or a seccomp policy refusing
        ``io_uring_setup``, ``kernel.io_uring_disabled``, a kernel before 5.11).
    """
    if platform.machine() not in ("x86_64", "AMD64"):
        raise RingUnavailable(errno.ENOSYS, f"io_uring is used on x86-64 only, not {platform.machine()}")
    params = ctypes.create_string_buffer(_PARAMS.size)
    ring_fd = _call(_SYS_IO_URING_SETUP, _ENTRIES, params)
    if ring_fd < 0:
        code = ctypes.get_errno()
        raise RingUnavailable(code, f"io_uring_setup: {os.strerror(code)}")
    try:
        return Ring(int(ring_fd), _PARAMS.unpack(params.raw), spin=spin)
    except BaseException:
        os.close(ring_fd)
        raise


SYNC_RING = StashKey["Ring | None"]("store_mmap.sync_ring")
"""The store's ring (None: syncs through the flush thread), for the runtime figures."""

__all__ = ["SYNC_RING", "Ring", "RingOp", "RingUnavailable", "open_ring"]
