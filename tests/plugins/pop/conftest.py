from tests.network.conftest import cluster_factory  # noqa: F401
