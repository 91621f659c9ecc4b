"""The driver's planning questions (``plugins.spark_export.catalog``) against a real NameServer
and broker: a topic without a route is missing, a cluster that does not answer is asked again
(``fetchOffset.numRetries``) and then fails, never taken for a topic that is gone."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator

import pytest

from plugins.spark_export.catalog import BrokerCatalog, CatalogError
from tests.spark.spark_helpers import produce

QUICK = {"retries": 2, "retry_interval": 0.01, "timeout": 5.0}


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class DropsFirstConnections:
    """A TCP forwarder to ``target`` that closes the first ``drops`` connections it accepts
    (the client sees its request's connection lost, no answer) and forwards the later ones."""

    def __init__(self, target: str, drops: int) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.drops = drops
        self.accepted = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            if self.accepted <= self.drops:
                client.recv(65536)  # the request arrives; no answer goes back
                client.close()
                continue
            server = socket.create_connection(self.target)
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def flaky_namesrv(spark_broker) -> Iterator[DropsFirstConnections]:
    forwarder = DropsFirstConnections(spark_broker.namesrv, drops=1)
    yield forwarder
    forwarder.close()


def retries_logged(caplog: pytest.LogCaptureFixture) -> int:
    return sum("asking again" in record.getMessage() for record in caplog.records)


def test_a_cluster_that_does_not_answer_is_asked_again_then_fails_even_when_topics_may_be_missing(caplog):
    caplog.set_level(logging.WARNING, logger="plugins.spark_export.catalog")
    catalog = BrokerCatalog((f"127.0.0.1:{closed_port()}",), **QUICK)
    with pytest.raises(CatalogError, match="NameServer 127.0.0.1:"):
        catalog.bounds(["SparkCatalogAny"], missing_ok=True)  # not {}: a stream would call that data loss
    assert retries_logged(caplog) == 2


def test_a_topic_without_a_route_is_missing_at_once(spark_broker, caplog):
    caplog.set_level(logging.WARNING, logger="plugins.spark_export.catalog")
    catalog = BrokerCatalog((spark_broker.namesrv,), **QUICK)
    assert catalog.bounds(["SparkCatalogNever"], missing_ok=True) == {}
    with pytest.raises(CatalogError, match="'SparkCatalogNever' cannot be read: .*has no route"):
        catalog.bounds(["SparkCatalogNever"])
    assert retries_logged(caplog) == 0, "the NameServer's answer is final"


def test_a_lost_answer_is_asked_again_and_the_bounds_come(spark_broker, flaky_namesrv, caplog):
    caplog.set_level(logging.WARNING, logger="plugins.spark_export.catalog")
    produce(spark_broker.namesrv, "SparkCatalog", 40)
    catalog = BrokerCatalog((flaky_namesrv.address,), **QUICK)
    bounds = catalog.bounds(["SparkCatalog"], missing_ok=True)
    assert sum(b.max_offset - b.min_offset for b in bounds.values()) == 40
    assert flaky_namesrv.accepted >= 2 and retries_logged(caplog) == 1


def test_without_retries_a_lost_answer_fails_the_question(spark_broker, flaky_namesrv):
    produce(spark_broker.namesrv, "SparkCatalog", 1)
    catalog = BrokerCatalog((flaky_namesrv.address,), retries=0, timeout=5.0)
    with pytest.raises(CatalogError, match="closed"):
        catalog.bounds(["SparkCatalog"], missing_ok=True)
