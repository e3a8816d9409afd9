"""Client-side conformance: a scripted broker (the reference broker's engine) judges client libraries."""
