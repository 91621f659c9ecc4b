"""Test support for the kernel and for plugin authors (like ``trio.testing``).

* :mod:`kernel.testing.memory_store`: the in-memory reference store (``store = "memory"``).
* :mod:`kernel.testing.contracts`: ``check_message_store`` for store plugins.
* :mod:`kernel.testing.helpers`: ``make_config``, ``make_context``, ``dispatch_all``.
* :mod:`kernel.testing.power_cut`: power-cut simulation on a loop-mounted image (what an
  acknowledgement survives when the machine dies), with its writer
  :mod:`kernel.testing.power_cut_writer`.
"""

from kernel.testing.helpers import dispatch_all, make_config, make_context

__all__ = ["dispatch_all", "make_config", "make_context"]
