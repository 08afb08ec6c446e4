"""How a change reaches the edges: a mutation's one commit, manifest generation and push, with its
webhook events in the same transaction (`publisher`); the edges control knows and the
signed, ordered fan-out of manifest changes and purges to them (`edge_registry`); and the demo zone published on a first start (`demo`)."""
