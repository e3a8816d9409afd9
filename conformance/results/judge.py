"""From an observation to a verdict: the one mapping the pytest plugin and the client judge share.

Rules (docs/design.md decision 4):
- An exception that says what verdict it stands for (`verdict` attribute, e.g. the client
  judge's `NotApplicable`) has that verdict.
- A `HarnessError` (or one of the caller's `harness_faults`, e.g. the plugin's watchdog) is
  `broken`: the harness or its environment failed, not the peer.
- A close 540 NOT_IMPLEMENTED for a method no rule of the test requires is `unimplemented`.
- An assertion (which the drivers' outcomes `Closed`, `NoReply`, `ConnectionLost` are) or one
  of the caller's `peer_faults` (pytest's `fail`) is the peer's behaviour: `failed`.
- An `OSError` is `failed` once the peer has answered in this test, else `broken`.
- An exception group is `broken` if any member is, else `failed`; anything else is a bug in
  the test or the harness: `broken`.
"""

from __future__ import annotations

from codec.constants import ReplyCode
from conformance.results.observations import Closed
from conformance.results.verdicts import HarnessError, Verdict


def observed_verdict(exc: BaseException, *, peer_replied: bool = True, required: bool = True,
                     peer_faults: tuple[type[BaseException], ...] = (),
                     harness_faults: tuple[type[BaseException], ...] = ()) -> Verdict:
    """The verdict `exc`, raised while judging a peer, stands for (module rules)."""
    if isinstance(exc, BaseExceptionGroup):
        members = {observed_verdict(e, peer_replied=peer_replied, required=required, peer_faults=peer_faults,
                                    harness_faults=harness_faults) for e in exc.exceptions}
        return Verdict.BROKEN if Verdict.BROKEN in members else Verdict.FAILED
    carried = getattr(exc, "verdict", None)
    if isinstance(carried, Verdict):
        return carried
    if isinstance(exc, (HarnessError, *harness_faults)):
        return Verdict.BROKEN
    if isinstance(exc, Closed) and exc.code == ReplyCode.NOT_IMPLEMENTED and not required:
        return Verdict.UNIMPLEMENTED  # 540 for a method no rule of the test requires on this profile
    if isinstance(exc, (AssertionError, *peer_faults)):
        return Verdict.FAILED
    if isinstance(exc, OSError):
        return Verdict.FAILED if peer_replied else Verdict.BROKEN
    return Verdict.BROKEN
