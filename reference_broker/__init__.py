"""reference broker package (see DESIGN.md)."""
