"""RocketMQ's wire and disk formats, as a library: the remoting protocol (frames, headers,
codes, signatures, the trio transport), the commit-log record and its batch codec (compiled
when built), message ids, send-batch bodies, property and tag codecs, and RocketMQ's names.

This is the floor the kernel, the plugins and the SDK all stand on: it imports nothing from
them, so a client, a tool or a proxy can speak RocketMQ without loading a broker.
"""
