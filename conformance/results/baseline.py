"""Baselines: a broker's known deviations, so a CI gate fails only on new ones (docs/design.md decision 8).

Responsibility: read and validate a baseline file (`load_baseline`), judge a run's verdicts
against it (`judge`), and write one from a run's recorded failures (`from_results`).

The file is TOML:

    [baseline]                      # optional
    description = "RabbitMQ 3.10.8, auto profile"

    [[deviation]]
    rule = "S002-01"                # a catalogue rule ID (required)
    reason = "why this is accepted" # required, non-empty
    link = "https://..."            # optional
    tests = ["test_cancel.py::test_cancel_pipelined_behind_consume_is_answered"]  # optional
    message = "consume-ok .* dropped"  # optional: a regex the failure text must contain
    profiles = ["rabbitmq-3.10"]    # optional: only runs judged by these profiles
    intermittent = true             # optional: it fails on some runs only (never an XPASS)

Rules (docs/design.md decision 13: a baseline accepts a failure, not a test):
- A deviation matches a failed test only when the failure names the deviation's rule (the
  rules the failure saw broken, `TestEvidence.failed_rules`, not every rule the test checks),
  the test is one of its `tests` (none given: any test), and, when it has a `message`, that
  regex is found (`re.search`) in what the failure said about that rule. A test pattern is
  "file.py::name[params]", "file.py::name" (every parametrisation), or the same without
  "file.py::"; "name" is the test's name in its file (a class's tests: "Class::name").
- A pattern names tests by their name and the entry's rule; its file is only a hint (suite
  files are split and moved between releases, and a user's baseline outlives that): among the
  run's tests of that name that check the rule, those in a file of that name are meant when
  there are any, else all of them (the test moved to another file, or its file was split).
- A `failed` test is `expected` when every rule it saw broken is matched by an applicable
  deviation; any other failure stays unexpected and fails the gate (exit 1).
- A deviation (or one of its test patterns) whose covered tests ran, none failed naming its rule
  and at least one passed is an XPASS: the broker no longer deviates, so the entry should be
  removed. A test that failed on another rule leaves the entry's rule unjudged (neither a failure
  of it nor a pass). Its
  passing tests get the gate outcome `xpass`; `--strict-baseline` fails the gate on it. An
  `intermittent` deviation (a race the broker loses only sometimes) is never an XPASS; the
  judgement says whether it was seen in this run (`Judgement.seen`).
- Other verdicts (`broken`, `non-strict`, `unimplemented`, `not-applicable`) are never
  changed by a baseline.
- Every defect of the file is a `BaselineError` naming the file and the entry: unknown keys,
  unknown rule IDs or profiles, an empty reason, a duplicate entry.
- A reason still holding the word TODO (as `amqp-conformance baseline` writes it) is accepted
  with a warning (`Baseline.warnings`, printed by `run`): the gate works, the file is unfinished.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from conformance.catalogue.mentions import rule_text
from conformance.catalogue.rules import PROFILES, all_rules
from conformance.model.wording import generic_wordings
from conformance.results.evidence import TestEvidence, test_key
from conformance.results.parts import read_table
from conformance.results.verdicts import UNJUDGED

EXPECTED, XPASS = "expected", "xpass"
_DEVIATION_KEYS = frozenset({"rule", "reason", "link", "tests", "message", "profiles", "intermittent"})
_TOP_KEYS = frozenset({"baseline", "deviation"})
_TODO = re.compile(r"\bTODO\b")


class BaselineError(ValueError):
    """The baseline file is unreadable or invalid; the message names the file and the entry."""


@dataclass(frozen=True)
class Deviation:
    rule: str
    reason: str
    link: str | None = None
    tests: tuple[str, ...] = ()
    profiles: tuple[str, ...] = ()
    intermittent: bool = False
    message: str | None = None  # a regex the failure text about `rule` must contain

    def applies_to(self, profile: str | None) -> bool:
        return not self.profiles or profile in self.profiles

    def describe(self, pattern: str | None = None) -> str:
        said = f", message /{self.message}/" if self.message else ""
        return f"{self.rule} ({pattern}{said})" if pattern else f"{self.rule}{f' ({said[2:]})' if said else ''}"

    def matches_failure(self, test: TestEvidence, pattern: str | None = None) -> bool:
        """Whether this deviation describes `test`'s failure of its rule (see the module rules)."""
        if test.verdict != "failed" or self.rule not in test.failed_rules:
            return False
        if self.message is not None and re.search(self.message, test.failure_text(self.rule)) is None:
            return False
        return pattern is None or matches(pattern, test.nodeid)


@dataclass(frozen=True)
class Baseline:
    source: str
    deviations: tuple[Deviation, ...]
    description: str | None = None

    @property
    def warnings(self) -> list[str]:
        """One line per deviation whose reason was left as TODO, or that is wider than a reason can be
        (no `tests`: any test; no `message`: any failure of its rule)."""
        lines = []
        for index, d in enumerate(self.deviations, start=1):
            where = f"baseline {self.source}: deviation #{index} ({d.rule})"
            if _TODO.search(d.reason):
                lines.append(f"{where}: the reason still says TODO; write why this deviation is accepted")
            missing = [key for key, value in (("tests", d.tests), ("message", d.message)) if not value]
            if missing:
                lines.append(f"{where}: no {' and no '.join(missing)}: it accepts any failure of {d.rule}"
                             f"{' in any test' if not d.tests else ''}; name the tests and the failure's text")
        return lines


def load_baseline(path: Path | str) -> Baseline:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BaselineError(f"baseline {path}: cannot read it: {getattr(exc, 'strerror', None) or exc}") from None
    return parse_baseline(text, str(path))


def parse_baseline(text: str, source: str = "<baseline>") -> Baseline:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BaselineError(f"baseline {source}: not valid TOML: {exc}") from None
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise BaselineError(f"baseline {source}: unknown keys {unknown} (want [baseline] and [[deviation]])")
    header = data.get("baseline", {})
    if not isinstance(header, dict) or not isinstance(header.get("description", ""), str):
        raise BaselineError(f"baseline {source}: [baseline] must be a table with an optional description")
    entries = data.get("deviation", [])
    if not isinstance(entries, list):
        raise BaselineError(f"baseline {source}: 'deviation' must be an array of tables ([[deviation]])")
    deviations = tuple(_deviation(source, index, entry) for index, entry in enumerate(entries, start=1))
    seen: set[tuple[str, tuple[str, ...], tuple[str, ...], str | None]] = set()
    for index, d in enumerate(deviations, start=1):
        key = (d.rule, d.tests, d.profiles, d.message)
        if key in seen:
            raise BaselineError(f"baseline {source}: deviation #{index} ({d.rule}): duplicate entry")
        seen.add(key)
    return Baseline(source, deviations, header.get("description"))


def _deviation(source: str, index: int, entry: object) -> Deviation:
    where = f"baseline {source}: deviation #{index}"
    if not isinstance(entry, dict):
        raise BaselineError(f"{where}: not a table")
    unknown = sorted(set(entry) - _DEVIATION_KEYS)
    if unknown:
        raise BaselineError(f"{where}: unknown keys {unknown} (known: {', '.join(sorted(_DEVIATION_KEYS))})")
    rule_id = entry.get("rule")
    if not isinstance(rule_id, str) or rule_id not in {r.id for r in all_rules()}:
        raise BaselineError(f"{where}: rule {rule_id!r} is not a rule ID of the catalogue")
    where = f"{where} ({rule_id})"
    reason = entry.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise BaselineError(f"{where}: 'reason' must be a non-empty string")
    link = entry.get("link")
    if link is not None and (not isinstance(link, str) or not link.startswith(("http://", "https://"))):
        raise BaselineError(f"{where}: 'link' must be an http(s):// URL")
    tests, profiles = _strings(entry, "tests", where), _strings(entry, "profiles", where)
    for profile in profiles:
        if profile not in PROFILES:
            raise BaselineError(f"{where}: unknown profile {profile!r} (one of: {', '.join(PROFILES)})")
    intermittent = entry.get("intermittent", False)
    if not isinstance(intermittent, bool):
        raise BaselineError(f"{where}: 'intermittent' must be true or false")
    message = entry.get("message")
    if message is not None:
        if not isinstance(message, str) or not message.strip():
            raise BaselineError(f"{where}: 'message' must be a non-empty regular expression")
        try:
            re.compile(message)
        except re.error as exc:
            raise BaselineError(f"{where}: 'message' is not a valid regular expression: {exc}") from None
        generic = generic_match(rule_id, message)
        if generic is not None:
            raise BaselineError(f"{where}: 'message' /{message}/ would accept the model's generic wording for "
                                f"{rule_id} ({generic!r}), so any failure of {rule_id}, not only the one the reason "
                                "describes: match what is particular to that failure")
    return Deviation(rule_id, reason.strip(), link, tests, profiles, intermittent, message)


def generic_match(rule_id: str, message: str) -> str | None:
    """The first text in `rule_id`'s generic wording (conformance.model.wording) that `message` matches."""
    return next((text for text in generic_wordings().get(rule_id, ()) if re.search(message, text)), None)


def _strings(entry: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = entry.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise BaselineError(f"{where}: {key!r} must be a list of non-empty strings")
    return tuple(v.strip() for v in value)


def matches(pattern: str, nodeid: str, exact: bool = False) -> bool:
    """Whether a baseline test pattern names this test (see the module rules); `exact` also
    requires the pattern's file, when it names one (by its name: "conformance/suite/x.py::t"
    and "x.py::t" name the same file)."""
    key = test_key(nodeid)
    name = key.partition("::")[2] or key
    if "::" not in pattern:
        return pattern in {name, name.split("[", 1)[0]}
    if exact:
        return test_key(pattern) in {key, key.split("[", 1)[0]}
    wanted = pattern.partition("::")[2]
    return wanted in {name, name.split("[", 1)[0]}


def covered_by(pattern: str, nodeids: Iterable[str]) -> set[str]:
    """The tests among `nodeids` a pattern names: by file and name when that file has the test,
    else by name alone (the file is a hint: the test was moved or its file split)."""
    nodeids = list(nodeids)
    exact = {n for n in nodeids if matches(pattern, n, exact=True)}
    return exact or {n for n in nodeids if matches(pattern, n)}


@dataclass
class Judgement:
    """A run judged against a baseline: the gate outcome of every test, and the XPASS entries."""

    outcomes: dict[str, str] = field(default_factory=dict)  # nodeid -> verdict, "expected" or "xpass"
    reasons: dict[str, Deviation] = field(default_factory=dict)  # nodeid of an expected failure -> its entry
    xpasses: list[tuple[Deviation, str | None, tuple[str, ...]]] = field(default_factory=list)
    unexercised: list[Deviation] = field(default_factory=list)  # applicable entries no test of the run checked
    matched: dict[tuple[str, str], Deviation] = field(default_factory=dict)  # (nodeid, rule) -> the entry
    seen: dict[Deviation, tuple[str, ...]] = field(default_factory=dict)  # applicable entry -> the failures it matched

    def outcome(self, test: TestEvidence) -> str:
        return self.outcomes.get(test.nodeid, test.verdict)

    def rule_outcome(self, test: TestEvidence, rule_id: str) -> str:
        """The gate outcome of one rule in one test: a failure of another rule leaves it unjudged."""
        if test.verdict != "failed":
            return self.outcome(test)
        if rule_id not in test.failed_rules:
            return UNJUDGED
        return EXPECTED if (test.nodeid, rule_id) in self.matched else "failed"

    def intermittent_lines(self, history: dict[tuple[Any, ...], tuple[int, int]] | None = None) -> list[str]:
        """Per intermittent entry: whether this run saw it, and (from `lake_history`) in how many of
        the lake's runs of this broker it was seen."""
        lines = []
        for d, nodeids in self.seen.items():
            if not d.intermittent:
                continue
            now = f"seen in this run ({', '.join(test_key(n) for n in nodeids)})" if nodeids else "not seen in this run"
            seen, runs = (history or {}).get(entry_key(d), (0, 0))
            lake = f"; seen in {seen} of {runs} run{'' if runs == 1 else 's'} of this lake" if runs else ""
            lines.append(f"intermittent {d.describe(', '.join(d.tests) or None)}: {now}{lake}")
        return lines


def entry_key(deviation: Deviation) -> tuple[Any, ...]:
    """What names an entry across runs (the run record's baseline judgement, the report's k of n)."""
    return deviation.rule, tuple(deviation.tests), deviation.message


def lake_history(results_dir: Path | str, broker_url: str | None) -> dict[tuple[Any, ...], tuple[int, int]]:
    """Per baseline entry: in how many of the lake's runs of this broker it matched a failure, of
    the runs judged with it. Empty when the lake cannot be read."""
    try:
        runs = read_table(results_dir, "runs").to_pylist()
    except (OSError, ValueError):
        return {}
    history: dict[tuple[Any, ...], list[bool]] = {}
    for run in runs:
        if broker_url is not None and run.get("broker_url") != broker_url:
            continue
        try:
            entries = json.loads(run.get("baseline") or "{}").get("entries", [])
        except (ValueError, AttributeError):
            continue
        for e in entries:
            history.setdefault((e["rule"], tuple(e["tests"]), e.get("message")), []).append(bool(e["matched"]))
    return {key: (sum(seen), len(seen)) for key, seen in history.items()}


def judgement_json(baseline: Baseline, judgement: Judgement) -> str:
    """What a run's record keeps of its baseline: each applicable entry and the failures it matched, so
    a report over many runs says how often an intermittent entry was seen (k of n)."""
    entries = [{"rule": d.rule, "tests": list(d.tests), "message": d.message, "intermittent": d.intermittent,
                "reason": d.reason, "matched": list(nodeids),
                "xpass": any(x is d for x, *_ in judgement.xpasses)} for d, nodeids in judgement.seen.items()]
    return json.dumps({"source": baseline.source, "entries": entries}, sort_keys=True)


def judge(tests: Sequence[TestEvidence], baseline: Baseline | None, profile: str | None) -> Judgement:
    """Apply `baseline` to a run's tests (see the module rules)."""
    result = Judgement({t.nodeid: t.verdict for t in tests})
    for deviation in baseline.deviations if baseline is not None else ():
        if not deviation.applies_to(profile):
            continue
        covered = [t for t in tests if deviation.rule in t.rule_ids or deviation.rule in t.failed_rules]
        if not covered:
            result.unexercised.append(deviation)
        seen: list[str] = []
        for pattern in deviation.tests or (None,):  # by name and rule, the file a hint (module rules)
            names = covered_by(pattern, [t.nodeid for t in covered]) if pattern is not None else None
            unit = [t for t in covered if names is None or t.nodeid in names]
            for test in unit:
                if deviation.matches_failure(test):
                    result.matched.setdefault((test.nodeid, deviation.rule), deviation)
                    seen.append(test.nodeid)
            failed = [t for t in unit if t.verdict == "failed" and deviation.rule in t.failed_rules]
            passed = [t for t in unit if t.verdict == "passed"]
            if passed and not failed and not deviation.intermittent:
                result.xpasses.append((deviation, pattern, tuple(t.nodeid for t in passed)))
        result.seen[deviation] = tuple(dict.fromkeys(seen))
    for test in tests:
        if test.verdict == "failed" and all((test.nodeid, r) in result.matched for r in test.failed_rules):
            result.outcomes[test.nodeid] = EXPECTED
            result.reasons[test.nodeid] = result.matched[test.nodeid, test.failed_rules[0]]
    for *_, passed_ids in result.xpasses:
        for nodeid in passed_ids:
            result.outcomes[nodeid] = XPASS
    return result


def from_results(results_dir: Path | str, run_id: str | None = None) -> tuple[str, str, int]:
    """(baseline TOML text, run id, entries) from a run's failed tests; the latest run by default.

    ValueError when the directory holds no runs or not that one.
    """
    try:
        runs = read_table(results_dir, "runs").to_pylist()
    except (OSError, ValueError) as exc:
        raise ValueError(f"--from {results_dir}: no results there ({str(exc).splitlines()[0]})") from None
    if not runs:
        raise ValueError(f"--from {results_dir}: no runs recorded there")
    if run_id is None:
        run = max(runs, key=lambda r: r["started"])
    else:
        run = next((r for r in runs if r["run_id"] == run_id), None)
        if run is None:
            raise ValueError(f"--run {run_id}: no such run in {results_dir}")
    tests = read_table(results_dir, "tests", run["run_id"]).to_pylist()
    deviations = _deviations_of(tests, run.get("profile"), run["run_id"])
    return render(deviations, _header(run)), str(run["run_id"]), len(deviations)


def _deviations_of(tests: list[dict[str, Any]], profile: str | None, run_id: str) -> list[Deviation]:
    """One entry per broken rule: the tests that failed it and a pattern of what each failure said."""
    failed = [t for t in tests if t["verdict"] == "failed" and (t.get("failed_rules") or t["rule_ids"])]
    by_rule: dict[str, list[dict[str, Any]]] = {}
    for test in failed:
        for rule_id in test.get("failed_rules") or test["rule_ids"][:1]:
            by_rule.setdefault(rule_id, []).append(test)
    deviations = []
    for rule_id, rows in by_rule.items():
        patterns = tuple(sorted({test_key(t["test_id"]) for t in rows}))
        texts = [rule_text(str(t["message"] or ""), rule_id) for t in rows]
        message = "|".join(dict.fromkeys(message_pattern(text) for text in texts if text)) or None
        if message is not None and "|" in message:
            message = f"(?:{message})"
        reason = f"TODO: why this is accepted. Seen in run {run_id}: {(texts[0] if texts else '')[:300]}"
        deviations.append(Deviation(rule_id, reason, None, patterns, (profile,) if profile else (), message=message))
    return deviations


def message_pattern(text: str, limit: int = 200) -> str:
    """A regular expression for what a failure said: its text up to `limit` characters, with what
    changes from run to run left open (the run's generated names, timings, counts and tags); reply
    codes and class/method ids stay, since they are what a rule is about."""
    head = text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0]
    escaped = re.sub(r"([.^$*+?{}\[\]\\|()])", r"\\\1", head)
    escaped = re.sub(r"amqpc\\\.\S*|amq\\\.gen-\S*", lambda m: r"\S+", escaped)
    escaped = re.sub(r"b'm\d+'", lambda m: r"b'm\d+'", escaped)  # the machines' bodies: m1, m2, ...
    return _NUMBER.sub(lambda m: m.group(0) if _kept(m) else r"\d+(?:\.\d+)?", escaped)


_NUMBER = re.compile(r"(?<![A-Za-z0-9\\])\d+(?:\\\.\d+)?(?![A-Za-z])")  # a tag like 1795556205_54 too


def _kept(number: re.Match[str]) -> bool:
    """A reply code (200-599) or a class/method id ("60/80")."""
    text, value = number.string, number.group(0)
    beside = text[max(number.start() - 1, 0):number.start()] + text[number.end():number.end() + 1]
    return "/" in beside or (value.isdigit() and len(value) == 3 and 200 <= int(value) <= 599)


def _header(run: dict[str, Any]) -> str:
    broker = " ".join(str(run.get(k) or "") for k in ("product", "version")).strip() or run.get("broker_url")
    return (f"# amqp-conformance baseline, written {datetime.now(UTC):%Y-%m-%d} by `amqp-conformance baseline` from run\n"
            f"# {run['run_id']} ({broker}, profile {run.get('profile')}, client {run.get('client')}).\n"
            f"# Replace each TODO reason with why the deviation is accepted, and add a link where one exists.\n")


def render(deviations: Iterable[Deviation], header: str = "", description: str | None = None) -> str:
    """Baseline TOML for `deviations` (strings are written as TOML basic strings)."""
    lines = [header.rstrip("\n")] if header else []
    if description:
        lines += ["[baseline]", f"description = {_string(description)}", ""]
    for d in deviations:
        lines += ["[[deviation]]", f"rule = {_string(d.rule)}", f"reason = {_string(d.reason)}"]
        if d.link:
            lines.append(f"link = {_string(d.link)}")
        if d.tests:
            lines.append(f"tests = [{', '.join(_string(t) for t in d.tests)}]")
        if d.message:
            lines.append(f"message = {_string(d.message)}")
        if d.profiles:
            lines.append(f"profiles = [{', '.join(_string(p) for p in d.profiles)}]")
        if d.intermittent:
            lines.append("intermittent = true")
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def _string(text: str) -> str:
    # JSON string escapes are valid TOML basic-string escapes; TOML also wants DEL escaped
    return json.dumps(text).replace("\x7f", "\\u007f")
