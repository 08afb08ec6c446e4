"""Suite-wide fixtures. Module-specific fixtures live beside their tests."""
