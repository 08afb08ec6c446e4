from tests.edge.routes.conftest import make_cdn  # noqa: F401  (a real control and edge in one loop)
