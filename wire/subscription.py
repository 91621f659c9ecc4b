"""A consumer's subscription to one topic: RocketMQ's tag expressions (``*`` or ``a || b``).

Shared by the broker (which filters pulls by it) and the client SDK (which sends it in heartbeats
and filters again on exact tags, as RocketMQ's clients do).
"""

from __future__ import annotations

from typing import Any

import attrs

from wire.message import tags_code


@attrs.frozen
class Subscription:
    """A parsed tag subscription: ``*`` or ``a || b`` (tag hashes recomputed here, because
    the C++ client's ``codeSet`` is wrong)."""

    topic: str
    expression: str
    tags: frozenset[str] | None
    """``None`` means every tag (``*`` or an empty expression)."""
    codes: frozenset[int] | None
    version: int = 0
    expression_type: str = "TAG"

    @classmethod
    def parse(
        cls, topic: str, expression: str | None, version: int = 0, expression_type: str = "TAG"
    ) -> Subscription:
        text = (expression or "").strip()
        if not text or text == "*":
            return cls(topic, "*", None, None, version, expression_type)
        tags = frozenset(t.strip() for t in text.split("||") if t.strip())
        return cls(topic, text, tags, frozenset(tags_code(t) for t in tags), version, expression_type)

    def to_json(self) -> dict[str, Any]:
        return {
            "classFilterMode": False,
            "codeSet": sorted(self.codes or ()),
            "expressionType": self.expression_type,
            "subString": self.expression,
            "subVersion": self.version,
            "tagsSet": sorted(self.tags or ()),
            "topic": self.topic,
        }

    def matches(self, tags: str | None) -> bool:
        """Whether a message with ``tags`` belongs to this subscription."""
        return self.tags is None or tags in self.tags
