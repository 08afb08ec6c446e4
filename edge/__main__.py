"""`python -m edge`: run one edge node (the process `assetcdn edge` starts)."""

from edge.server import main

main()
