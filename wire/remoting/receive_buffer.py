"""Reading a socket into a buffer that is kept, copying out only what arrived.

``os.read(fd, 256 KiB)`` allocates 256 KiB for every call and shrinks it to what arrived:
above glibc's mmap threshold that is 20-26 µs a read on this machine kind against 4-5 µs for a
read into a kept buffer and a copy of the few hundred bytes a lone request holds (socketpair
microbenchmark, docs/performance.md "Twentieth step"). Both ends of every single-message round
trip read once, so the difference is paid twice per send.

The buffer is kept per thread, not per connection: every read of a trio run happens on its
thread and is copied out before the next can start, and a broker with ten thousand
connections must not hold ten thousand 256 KiB buffers.
"""

from __future__ import annotations

import os
import threading

RECEIVE_CHUNK = 256 * 1024
"""Most bytes one read takes: pipelined producers fill this much between two reads."""

_per_thread = threading.local()


def _thread_buffer() -> bytearray:
    buffer: bytearray | None = getattr(_per_thread, "buffer", None)
    if buffer is None:
        buffer = _per_thread.buffer = bytearray(RECEIVE_CHUNK)
    return buffer


def read_available(fd: int) -> bytes:
    """What ``fd`` holds now, up to :data:`RECEIVE_CHUNK` bytes; ``b""`` when the peer closed.

    :raises BlockingIOError: nothing to read yet (a non-blocking socket).
    :raises OSError: the read failed (a reset connection).
    """
    buffer = _thread_buffer()
    size = os.readv(fd, (buffer,))
    with memoryview(buffer) as view:
        return bytes(view[:size])
