"""reports package (see DESIGN.md)."""
