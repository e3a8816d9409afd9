"""From pytest reports to verdicts and evidence (docs/design.md decision 4).

Responsibility: classify each phase report of a rule test into a `Verdict` with a message,
carry one test's state across its phases (`TestState`), extract the evidence that goes into
its record (the broker's close reply, Hypothesis's minimal example and seed), and render the
frame log and the per-area summary for humans.

Rules:
- passed → `passed`. A failure raised by an assertion, `pytest.fail` or a driver outcome
  (`Closed`, `NoReply`, `ConnectionLost`) is the broker's behaviour → `failed`. A close 540
  NOT_IMPLEMENTED is `unimplemented` only when no rule of the test is required on the profile
  (required, or a variant it judges); a required method answered with 540 is `failed`
  (docs/design.md decision 13).
- `HarnessError`, the watchdog's `WatchdogExpired`, an `OSError` before the broker sent anything in this test (after that it
  is `failed`), and any other exception (a bug in the test or the harness) → `broken`. An
  exception group is `broken` if any member is, else `failed`. The plugin re-judges
  `NoReply`, `ConnectionLost` and `OSError` with its health probe (`may_mean_broker_down`):
  `broken` when the broker as a whole is wedged or gone.
- A skip maps through its prefix (`verdicts.SKIP_PREFIX`, and `BROKEN_PREFIX` for the
  plugin's own); a skip without a verdict prefix is `broken`: a suite test must say why it
  does not run. xfail → `failed` (the deviation was observed); XPASS → `passed`.
- The first phase that does not pass decides; a teardown error only replaces `passed`.
- A failure names the rules it saw broken (`rule_failures`, docs/design.md decision 13): each
  exception of the failure that carries `rules` (`RuleViolation`) names those, else the rules
  its text names (`named_rules`), else the test's own rules; an exception group names the
  rules of its members. The verdict's message starts with one line per broken rule and its
  title (`failure_message`), then what the broker did.
- Texts stored in records are bounded (`MAX_TEXT` characters; a Hypothesis minimal example,
  which carries the frames of its run, `MAX_EXAMPLE`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import ClassVar, NamedTuple

import pytest

from codec import ChannelClose, Command, ConnectionClose, MethodFrame
from conformance.catalogue.mentions import named_rules
from conformance.catalogue.rules import AREAS, rule
from conformance.drivers.raw import Closed, ConnectionLost, FrameRecord, NoReply
from conformance.plugin.explain import protocol_terms
from conformance.plugin.health import LeakReport
from conformance.plugin.watchdog import WatchdogExpired
from conformance.results.evidence import frame_log
from conformance.results.judge import observed_verdict
from conformance.results.records import TestRecord
from conformance.results.verdicts import SKIP_PREFIX, Verdict, verdict_of_skip

BROKEN_PREFIX = "broken: "
MAX_TEXT = 4000
MAX_EXAMPLE = 60000  # a shrunk example with its steps as run and the frames of that run
_EXAMPLE_NOTE = re.compile(r"^(Falsifying example|Failing test case|state = )")
_DID_NOT_RAISE = re.compile(r"^DID NOT RAISE (?:any of \()?([^()]+?)\)?$")
_AWAITED = {"ChannelClosed": "channel.close", "ConnectionClosed": "connection.close",
            "ConnectionLost": "end of the connection", "Closed": "channel.close or connection.close"}
_ASSERT_INTROSPECTION = re.compile(r"\nassert ")
_SEED = re.compile(r"@seed\((\d+)\)|--hypothesis-seed=(\d+)")


class Reply(NamedTuple):
    """A broker-initiated close: what the records call the test's reply."""

    scope: str  # channel | connection
    code: int
    text: str
    class_id: int
    method_id: int


@dataclass
class TestState:
    """One rule test across its setup, call and teardown phases."""

    __test__: ClassVar[bool] = False  # not a pytest test class

    started: datetime = field(default_factory=lambda: datetime.now(UTC))
    verdict: Verdict = Verdict.PASSED
    outcome: str = "passed"
    phase: str = "call"
    message: str | None = None
    duration: float = 0.0
    duration_total: float = 0.0
    failure: BaseException | None = None
    failures: dict[str, str] = field(default_factory=dict)  # broken rule -> its failure text (`failed` only)

    def judge_rules(self, test_rules: Sequence[str], frames: Sequence[FrameRecord] = ()) -> None:
        """Name the rules a `failed` verdict saw broken, and lead its message with them."""
        if self.verdict is Verdict.FAILED:
            self.failures = rule_failures(self.failure, self.message, test_rules, frames)
            self.message = failure_message(self.failures)

    def update(self, report: pytest.TestReport, verdict: Verdict, message: str | None,
               exc: BaseException | None, lock_wait: float = 0.0) -> None:
        """`lock_wait`: seconds the test has waited so far for other tests (the exclusive lock of
        a broker-wide change, taken in the call), left out of its durations."""
        own = report.duration - lock_wait if report.when == "call" else report.duration
        self.duration_total += max(own, 0.0)
        if report.when == "call":
            self.duration = max(own, 0.0)
        if report.failed:
            self.outcome = "failed"
        elif report.skipped and self.outcome == "passed":
            self.outcome = "skipped"
        replaces = self.verdict is Verdict.PASSED and verdict is not Verdict.PASSED
        if replaces or (report.when == "call" and self.phase == "call"):
            self.verdict, self.message, self.phase = verdict, message, report.when
            self.failure = exc if verdict is not Verdict.PASSED else None


def phase_verdict(report: pytest.TestReport, exc: BaseException | None, broker_replied: bool,
                  required: bool = True, frames: Sequence[FrameRecord] = ()) -> tuple[Verdict, str | None]:
    """The verdict one phase report stands for (see the module rules); `frames`, the test's so far,
    say what the broker did when a check waited for a close that never came."""
    xfail = getattr(report, "wasxfail", None)
    if report.passed:
        return Verdict.PASSED, (f"XPASS: {xfail}" if xfail else None)
    if report.skipped:
        if xfail is not None:
            return Verdict.FAILED, _bounded(f"xfail: {xfail}")
        reason = skip_reason(report)
        if reason.startswith(BROKEN_PREFIX):
            return Verdict.BROKEN, _bounded(reason.removeprefix(BROKEN_PREFIX))
        verdict = verdict_of_skip(reason)
        if verdict is None:
            return Verdict.BROKEN, _bounded(f"skipped without a verdict prefix: {reason}")
        return verdict, _bounded(reason.removeprefix(SKIP_PREFIX[verdict]))
    if exc is None:
        return Verdict.FAILED, _bounded(str(report.longrepr))
    return exception_verdict(exc, broker_replied, required), _bounded(exception_text(exc, frames))


def exception_verdict(exc: BaseException, broker_replied: bool, required: bool = True) -> Verdict:
    return observed_verdict(exc, peer_replied=broker_replied, required=required,
                            peer_faults=(pytest.fail.Exception,), harness_faults=(WatchdogExpired,))


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for member in exc.exceptions:
            yield from _leaves(member)
    else:
        yield exc


def rule_failures(exc: BaseException | None, message: str | None, test_rules: Sequence[str],
                  frames: Sequence[FrameRecord] = ()) -> dict[str, str]:
    """Broken rule -> the failure text that shows it, for a `failed` verdict (module rules)."""
    found: dict[str, str] = {}
    for leaf in _leaves(exc) if exc is not None else ():
        text = exception_text(leaf, frames)
        for rule_id in getattr(leaf, "rules", None) or _rules_named(text):
            found.setdefault(rule_id, text)
    if not found:
        for rule_id in _rules_named(message) or test_rules:
            found.setdefault(rule_id, message or "failed")
    return found


def failure_message(failures: dict[str, str]) -> str:
    """The message of a failed verdict: each broken rule with its title, then the failure texts."""
    heads = []
    for rule_id in failures:
        try:
            heads.append(f"{rule_id} broken: {rule(rule_id).plain_title}")
        except KeyError:
            heads.append(f"{rule_id} broken")
    texts = list(dict.fromkeys(failures.values()))
    return _bounded("\n".join(heads + texts))


def may_mean_broker_down(exc: BaseException | None) -> bool:
    """Worth a health probe before judging: the broker went silent or away."""
    return isinstance(exc, NoReply | ConnectionLost | OSError)


def skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return str(text).removeprefix("Skipped: ")


def exception_text(exc: BaseException, frames: Sequence[FrameRecord] = ()) -> str:
    if isinstance(exc, pytest.fail.Exception):
        return did_not_raise(exc.msg, frames) if exc.msg else "failed"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _rules_named(text: str | None) -> tuple[str, ...]:
    """The rules a failure text names. `assert condition, message`: pytest appends its explanation
    of the condition ("assert ...", "+ where ... = expect('FRM-01')"); a rule id quoted from the
    condition's source is not a rule the broker broke, so only the message before it names rules
    (the explanation stays in the text: it says what was compared)."""
    if text and not text.removeprefix("AssertionError: ").startswith("assert "):
        text = _ASSERT_INTROSPECTION.split(text, maxsplit=1)[0]
    return named_rules(text)


def did_not_raise(text: str, frames: Sequence[FrameRecord]) -> str:
    """pytest.raises' "DID NOT RAISE ChannelClosed" in protocol terms: the close the check waited for,
    and the broker's last replies of the test instead (any other text unchanged)."""
    found = _DID_NOT_RAISE.match(text)
    if found is None:
        return text
    awaited = " or ".join(_AWAITED.get(name.strip(), name.strip()) for name in found.group(1).split(","))
    replies = [f"ch{r.channel} {protocol_terms(r.frame.method)}" for r in frames
               if r.direction == "in" and isinstance(r.frame, Command | MethodFrame)]
    did = (f"its last {'reply' if len(replies[-3:]) == 1 else 'replies'} in this test: {'; '.join(replies[-3:])}"
           if replies else "it sent nothing in this test")
    return f"no {awaited} from the broker where the rule requires one ({text}); {did}"


def _bounded(text: str, limit: int = MAX_TEXT) -> str:
    """`text` within `limit` characters, cut at a line end with a note, never inside a value."""
    if len(text) <= limit:
        return text
    kept, size = [], 0
    lines = text.splitlines()
    for line in lines:
        if size + len(line) + 1 > limit - 80:
            break
        kept.append(line)
        size += len(line) + 1
    if not kept:  # one very long line: cut it at a word boundary
        head = text[: limit - 80].rsplit(" ", 1)[0]
        return f"{head}\n[{len(text) - len(head)} more characters: see the test's record and pytest-output.txt]"
    return "\n".join(kept) + f"\n[{len(lines) - len(kept)} more lines: see the test's record and pytest-output.txt]"


def _walk(exc: BaseException | None) -> Iterator[BaseException]:
    seen: set[int] = set()
    stack = [exc] if exc is not None else []
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        if isinstance(current, BaseExceptionGroup):
            stack.extend(current.exceptions)
        stack.extend(e for e in (current.__cause__, current.__context__) if e is not None)


def reply_of(exc: BaseException | None, frames: Sequence[FrameRecord]) -> Reply | None:
    """The close that explains a failure, else the last close the broker sent in the test."""
    for current in _walk(exc):
        if isinstance(current, Closed):
            return Reply(current.scope, current.code, current.text, current.class_id, current.method_id)
    for record in reversed(frames):
        if record.direction == "in" and isinstance(record.frame, MethodFrame):
            method = record.frame.method
            if isinstance(method, ChannelClose | ConnectionClose):
                scope = "channel" if isinstance(method, ChannelClose) else "connection"
                return Reply(scope, method.reply_code, method.reply_text, method.class_id, method.method_id)
    return None


def hypothesis_evidence(exc: BaseException | None, configured_seed: object) -> tuple[str | None, str | None]:
    """(seed, minimal example) from Hypothesis's notes on a failure, if it was a Hypothesis one."""
    notes = [note for current in _walk(exc) for note in getattr(current, "__notes__", ())]
    if not any(_EXAMPLE_NOTE.match(note) for note in notes):
        return None, None
    example = _bounded("\n".join(notes), MAX_EXAMPLE)
    found = _SEED.search(example)
    seed = next(g for g in found.groups() if g) if found else None
    if seed is None and configured_seed is not None:
        seed = str(configured_seed)
    return seed, example


def summary_lines(counts: Counter[tuple[str, Verdict]], areas: Iterable[str]) -> list[str]:
    """A text table: one row per area, one column per verdict, and a total row."""
    verdicts = list(Verdict)
    rows = [a for a in areas if any(counts[a, v] for v in verdicts)]
    rows += sorted({a for a, _ in counts} - set(rows))
    width = max([len("area"), len("total"), *(len(a) for a in rows)])
    head = "area".ljust(width) + "".join(f"{v.value:>15}" for v in verdicts)
    lines = [head, "-" * len(head)]
    for area in rows:
        lines.append(area.ljust(width) + "".join(f"{counts[area, v] or '.':>15}" for v in verdicts))
    totals = [sum(counts[a, v] for a in rows) for v in verdicts]
    lines.append("total".ljust(width) + "".join(f"{t:>15}" for t in totals))
    return lines


def test_record(run_id: str, test_id: str, rule_ids: list[str], area: str, test: TestState,
                frames: Sequence[FrameRecord], seed_option: object) -> TestRecord:
    """The results record of a finished test, with its reply and Hypothesis evidence."""
    seed, example = hypothesis_evidence(test.failure, seed_option)
    record = TestRecord(run_id, test_id, rule_ids, area, test.verdict.value, test.outcome, test.phase,
                        test.started, test.duration, test.duration_total, hypothesis_seed=seed,
                        minimal_example=example, message=test.message, failed_rules=list(test.failures) or None)
    reply = reply_of(test.failure, frames)
    if reply is not None:
        record.reply_scope, record.reply_code, record.reply_text = reply.scope, reply.code, reply.text
        record.reply_class_id, record.reply_method_id = reply.class_id, reply.method_id
    return record


def summary_report(counts: Counter[tuple[str, Verdict]], broken: Sequence[tuple[str, str]], down: str | None,
                   leaks: LeakReport | None, limit: int = 20) -> list[tuple[str, dict[str, bool]]]:
    """The terminal summary: verdicts per area, broken tests, a down broker, leftovers."""
    lines: list[tuple[str, dict[str, bool]]] = [(line, {}) for line in summary_lines(counts, AREAS)]
    if down:
        lines.append((f"BROKER DOWN: {down}; the broker tests after it were not run (broken), exit status 3",
                      {"red": True, "bold": True}))
    for nodeid, message in broken[:limit]:
        lines.append((f"broken: {nodeid}: {message.splitlines()[0] if message else ''}", {"yellow": True}))
    if len(broken) > limit:
        lines.append((f"... and {len(broken) - limit} more broken tests", {}))
    if leaks is not None:
        lines += [(f"leftover (this run, found by {leaks.method}): {e}", {"yellow": True}) for e in leaks.ours]
        lines += [(f"leftover (earlier or concurrent runs): {e}", {}) for e in leaks.others]
        if leaks.error:
            lines.append((f"leak check: {leaks.error}", {"yellow": True}))
    return lines


def allure_labels(area: str, rule_ids: Sequence[str]) -> list[pytest.MarkDecorator]:
    """allure-pytest label markers: epic = area, feature = rule group ("ACK"), story = rule id."""
    groups = dict.fromkeys(r.split("-")[0] for r in rule_ids)
    return [pytest.mark.allure_label(area, label_type="epic"),
            pytest.mark.allure_label(*groups, label_type="feature"),
            pytest.mark.allure_label(*rule_ids, label_type="story")]


def allure_evidence(test: TestState, frames: Sequence[FrameRecord]) -> None:
    """Label the running Allure test with its verdict and attach its frame log."""
    import allure

    allure.dynamic.label("verdict", test.verdict.value)  # type: ignore[no-untyped-call]
    allure.attach(frame_log(frames), name="frames", attachment_type=allure.attachment_type.TEXT)
