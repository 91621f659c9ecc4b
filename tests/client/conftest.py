from tests.network.conftest import cluster_factory  # noqa: F401  (a NameServer + broker over TCP)
