"""Consumers: :class:`PushConsumer` (listener-driven) and :class:`LitePullConsumer` (poll)."""
