"""The conformance suite shipped with the package (`pytest --pyargs conformance.suite`)."""
