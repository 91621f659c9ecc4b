"""ha: master/slave replication.

Slaves report their offset, the master streams the log; a sync master waits for the slave's ack.

Not implemented yet (a later issue). This package is deliberately empty and is not declared as an
entry point, so a config that lists `ha` fails at start with "unknown plugin 'ha'" and the
list of plugins that do exist, instead of running without it.
"""
