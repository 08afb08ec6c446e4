"""assetcdn: a self-hostable asset CDN. `assetcdn.edge` (edge nodes), `assetcdn.control` (the
control plane) and `assetcdn.shared` (what both import)."""
