"""The process's open-files limit (``RLIMIT_NOFILE``): raised at start, named in errors.

Every consume queue holds files open, and so does every connection. On most Linux systems a
normal user's soft limit is 1024 while the hard limit is far higher; a broker that keeps the
soft limit runs out after a few hundred queues. The broker raises its soft limit to the hard
one at start (anyone may) and logs what it runs with; when a file still cannot be opened, the
error says which limit to raise and how.
"""

from __future__ import annotations

import errno
import resource

DESCRIPTOR_ERRORS = (errno.EMFILE, errno.ENFILE)


def raise_soft_limit() -> tuple[int, int]:
    """Raise the soft open-files limit to the hard one; the (soft, hard) limits now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard and (hard == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            return soft, hard  # a hard limit the kernel caps lower (nr_open): keep the soft one
        soft = hard
    return soft, hard


def explain_open_failure(error: BaseException) -> str:
    """``error`` (from opening a store file) with what to change, for a log line or a remark."""
    code = getattr(error, "errno", None)
    if code in DESCRIPTOR_ERRORS:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        which = "this process's" if code == errno.EMFILE else "the system's (fs.file-max)"
        return (
            f"{error}: {which} open-files limit is reached (RLIMIT_NOFILE {soft}, hard {hard}); "
            "raise it (ulimit -n, systemd LimitNOFILE=) or use fewer queues"
        )
    if code in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"{error}: the broker's user cannot write there (check the data directory's owner and mode)"
    if code == errno.ENOSPC:
        return f"{error}: the disk is full"
    return str(error)
