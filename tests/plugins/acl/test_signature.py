"""The request signature, computed independently here (hmac + base64 of the standard library)
from RocketMQ's rule, against what the SDK signs and what the broker's ACL accepts."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wire.remoting import RemotingCommand, RequestCode
from wire.remoting.signature import SessionCredentials, Signer, signed_content


def independent_signature(ext: dict[str, str], body: bytes, secret: str) -> str:
    """RocketMQ's rule as its docs state it: the values of the extFields but ``Signature``,
    ordered by name, then the body; HMAC-SHA1 with the secret; base64."""
    text = "".join(value for name, value in sorted(ext.items()) if name != "Signature")
    digest = hmac.new(secret.encode("utf-8"), text.encode("utf-8") + body, hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def test_the_cpp_clients_route_query_signs_its_documented_string():
    """The C++ client's GET_ROUTEINFO for TopicTest signs "ALIYUNTopicTest" (AccessKey empty)."""
    ext = {"topic": "TopicTest", "AccessKey": "", "OnsChannel": "ALIYUN"}
    assert signed_content(ext, b"") == b"ALIYUNTopicTest"


@given(
    ext=st.dictionaries(st.text(min_size=1, max_size=12), st.text(max_size=40), max_size=8),
    body=st.binary(max_size=300),
    secret=st.text(min_size=1, max_size=30),
)
def test_sdk_signatures_match_the_independent_computation_and_the_broker_check(ext, body, secret):
    ext.pop("Signature", None)
    ext.pop("_UNIQUE_KEY_QUERY", None)
    request = RemotingCommand.request(RequestCode.SEND_MESSAGE, ext, body)
    SessionCredentials("ak-中文", secret).sign(request)
    assert request.ext["AccessKey"] == "ak-中文"
    assert request.ext["Signature"] == independent_signature(request.ext, body, secret)
    assert Signer(secret).matches(request.ext, body)
    assert not Signer(secret).matches(request.ext, body + b"x")
    assert not Signer(secret + "x").matches(request.ext, body)


def test_a_known_vector():
    # Names in code-unit order: AccessKey, b, queueId, topic.
    ext = {"AccessKey": "RocketMQ", "topic": "Orders", "queueId": "3", "b": "Überweisung"}
    expected = base64.b64encode(
        hmac.new(b"12345678", "RocketMQÜberweisung3Orders".encode() + b"body", hashlib.sha1).digest()
    ).decode()
    request = RemotingCommand.request(RequestCode.SEND_MESSAGE, ext, b"body")
    SessionCredentials("RocketMQ", "12345678").sign(request)
    assert request.ext["Signature"] == expected


@pytest.mark.parametrize("secret", ["", "s", "x" * 64, "y" * 65, "秘密" * 40])
def test_secrets_of_every_length_sign_as_the_standard_library_does(secret):
    """Keys longer than SHA-1's block are hashed first, shorter ones padded (RFC 2104)."""
    ext = {"AccessKey": "ak", "topic": "Orders"}
    content = signed_content(ext, b"body")
    expected = base64.b64encode(hmac.new(secret.encode(), content, hashlib.sha1).digest()).decode()
    assert Signer(secret).sign(content) == expected
