"""Image analysis behind /api/ai/*: smart crop, moderation and alt text, from models that ship in
packages (nothing is downloaded at run time), or from an operator-configured vision endpoint."""
