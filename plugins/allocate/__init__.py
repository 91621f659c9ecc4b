"""allocate: consumer queue allocation strategies.

Averagely, by circle, by config, by machine room, machine room nearby, consistent hash.

Not implemented yet (issue 6). This package is deliberately empty and is not declared as an
entry point, so a config that lists `allocate` fails at start with "unknown plugin 'allocate'" and the
list of plugins that do exist, instead of running without it.
"""
