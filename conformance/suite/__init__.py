"""The conformance suite shipped with the package (`pytest --pyargs conformance.suite`).

One subpackage per area of the catalogue (ack, requeue, qos, confirms, cancel, timeout, errors,
framing, messages) holds that area's rule tests and model machine; `through_clients` the suite
through client libraries; `steps` the steps they share. A test's area comes from its rules, not
its folder. Baselines and reports name a test by its file's name (`evidence.test_key`): a file
name is used once in the whole suite.
"""

from conformance import SUITE_DIR

__all__ = ["SUITE_DIR"]
