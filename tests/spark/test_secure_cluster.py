"""The Spark source and sink against a broker with ACL on and every port TLS-enforcing:
options ``accessKey``/``secretKey``/``tlsCaFile`` reach the driver's planning and every
executor's pulls and sends; without them the read fails with the broker's reason."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from tests.interop.conftest import RunningBroker, start_broker
from tests.spark.spark_helpers import produce
from trocket.cli.defaults import TROCKET_DEFAULTS

ACL = """
accounts:
  - accessKey: spark-key
    secretKey: spark-secret
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
"""
KEYS = {"accessKey": "spark-key", "secretKey": "spark-secret"}


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningBroker, Path]]:
    root = tmp_path_factory.mktemp("secure-spark")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(root / "ca.pem")
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(root / "server.pem")
    (root / "plain_acl.yml").write_text(ACL)
    plugins = ", ".join(f'"{name}"' for name in (*TROCKET_DEFAULTS.plugins, "acl"))
    running = start_broker(
        root,
        f"""plugins = [{plugins}]
tls_server_mode = "enforcing"
tls_server_cert_path = "{root / "server.pem"}"
tls_server_key_path = "{root / "server.pem"}"
tls_enable = true
inner_access_key = "spark-key"
inner_secret_key = "spark-secret"
""",
    )
    try:
        yield running, root / "ca.pem"
    finally:
        running.stop()


def test_spark_reads_and_writes_a_cluster_with_acl_and_tls(spark, secure_broker, monkeypatch):
    broker, ca = secure_broker
    monkeypatch.setenv("TROCKET_TLS_CA_FILE", str(ca))  # the test's own producer (the SDK reads these)
    monkeypatch.setenv("TROCKET_ACCESS_KEY", KEYS["accessKey"])
    monkeypatch.setenv("TROCKET_SECRET_KEY", KEYS["secretKey"])
    bodies = produce(broker.namesrv, "SecureSpark", 300)
    for name in ("TROCKET_TLS_CA_FILE", "TROCKET_ACCESS_KEY", "TROCKET_SECRET_KEY"):
        monkeypatch.delenv(name)  # Spark gets everything through its options

    def reader():
        return spark.read.format("trocket").option("namesrv", broker.namesrv).option("topic", "SecureSpark")

    rows = reader().option("tlsCaFile", str(ca)).options(**KEYS).load().collect()
    assert sorted(r.body for r in rows) == sorted(bodies)

    copy = spark.createDataFrame([(b"copied-" + r.body,) for r in rows[:50]], "body binary")
    copy.write.format("trocket").option("namesrv", broker.namesrv).option("topic", "SecureSparkCopy").option(
        "tlsCaFile", str(ca)
    ).options(**KEYS).mode("append").save()
    copied = reader().option("topic", "SecureSparkCopy").option("tlsCaFile", str(ca)).options(**KEYS).load()
    assert copied.count() == 50

    with pytest.raises(Exception, match="NO_PERMISSION|not signed"):
        reader().option("tlsCaFile", str(ca)).load().collect()
    with pytest.raises(Exception, match="cannot connect|closed|TLS"):
        reader().options(**KEYS).load().collect()
