"""conformance package (see DESIGN.md)."""
