"""`python -m assetcdn.edge`: run one edge node (the process `assetcdn edge` starts)."""

from assetcdn.edge.server import main

main()
