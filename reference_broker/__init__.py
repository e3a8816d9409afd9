"""reference broker package (see docs/design.md)."""
