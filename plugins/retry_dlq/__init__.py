"""retry_dlq: consumer retries, delay levels, scheduled delivery and dead-letter queues.

Not implemented yet (issue 7). This package is deliberately empty and is not declared as an
entry point, so a config that lists `retry_dlq` fails at start with "unknown plugin 'retry_dlq'" and the
list of plugins that do exist, instead of running without it.
"""
