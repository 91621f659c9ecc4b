"""The producer's batch encoder writes what RocketMQ's per-message encoding writes.

``encode_messages`` shares the properties of messages without properties of their own and
takes the unique ids from one clock read; the body must still be, byte for byte, each message's
wire properties with its unique id, encoded one by one (``encode_batch``).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kernel.model import decode_properties
from trocket.client.batch import encode_batch, encode_messages
from trocket.client.message import Message
from wire.batch_codec import pure

_WORD = st.text(
    alphabet=st.characters(blacklist_characters="\x00\x01\x02 ", codec="utf-8"), min_size=1, max_size=6
)
_MESSAGE = st.builds(
    Message,
    topic=st.just("T"),
    body=st.binary(min_size=1, max_size=64),
    tags=st.one_of(st.none(), _WORD),
    keys=st.lists(_WORD, max_size=3),
    properties=st.one_of(
        st.just({}), st.dictionaries(_WORD, _WORD, max_size=2), st.just({"UNIQ_KEY": "MINE"})
    ),
    flag=st.integers(-(2**31), 2**31 - 1),
)


@given(st.lists(_MESSAGE, min_size=1, max_size=20))
@settings(max_examples=150, deadline=None)
def test_batch_body_is_each_message_encoded(messages):
    body, ids = encode_messages(messages)
    expected = []
    for message, unique in zip(messages, ids, strict=True):
        wire = message.wire_properties()
        wire.setdefault("UNIQ_KEY", unique)
        expected.append((message.flag, message.body, wire))
    assert body == encode_batch(expected)
    _, _, props_at, props_len, *_ = pure.entry_columns(body)
    stored = [
        decode_properties(body[a : a + n])["UNIQ_KEY"] for a, n in zip(props_at, props_len, strict=True)
    ]
    assert stored == ids
    fresh = [i for i, m in zip(ids, messages, strict=True) if "UNIQ_KEY" not in m.properties]
    assert len(set(fresh)) == len(fresh) and all(len(i) == 32 for i in fresh)
