"""The run kernel's front half: what a run is asked to do (its options, declared once)."""
