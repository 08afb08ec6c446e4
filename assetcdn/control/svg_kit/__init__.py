"""The files POST /api/pipeline makes from one SVG: a zone's logo in every format, its PWA icons,
banner, social card and favicon, or a stock asset's variants (`generate`), each raster rendered from
the sanitised vector at its final size (`render`). Not the edge's transform pipeline
(assetcdn/edge/transform/steps.py), which makes variants of stored images on request."""
