"""The client-side scenarios as a pytest suite: every client x every scenario as a test.

The client judge (`conformance.client_judge`) plays and judges them without pytest; this package
only adapts them to pytest (`pytest --pyargs conformance.client_suite.test_clients`).
"""
