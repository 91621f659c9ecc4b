"""The committed gRPC modules are what ``wire/grpc_v2/proto`` generates, and they carry the
RocketMQ 5 service the official clients call."""

from __future__ import annotations

import subprocess
import sys

from tests.support import REPO
from wire.grpc_v2 import definition_pb2, service_pb2


def test_generated_modules_are_fresh():
    result = subprocess.run(
        [sys.executable, "-m", "wire.grpc_v2.generate", "--check"], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def test_the_service_has_rocketmq_5s_methods_and_paths():
    service = service_pb2.DESCRIPTOR.services_by_name["MessagingService"]
    assert service.full_name == "apache.rocketmq.v2.MessagingService"
    methods = {m.name: (m.client_streaming, m.server_streaming) for m in service.methods}
    assert methods["Telemetry"] == (True, True)
    assert methods["ReceiveMessage"] == (False, True)
    assert methods["SendMessage"] == (False, False)
    assert len(methods) == 17
    # field numbers clients depend on: Message.body is 4, Resource.name 2
    assert definition_pb2.Message.DESCRIPTOR.fields_by_name["body"].number == 4
    assert definition_pb2.Resource.DESCRIPTOR.fields_by_name["name"].number == 2
