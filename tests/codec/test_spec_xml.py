"""Cross-check `codec.spec` (and the generated classes) against the RabbitMQ-extended spec XML.

The XML comes from the Debian package amqp-specs (the 2013 RabbitMQ-extended 0-9-1 XML, 60
methods). Without it the tests skip, or fail under AMQPC_STRICT=1 (CI installs the package).
The four methods RabbitMQ added after 2013 (connection.blocked/unblocked/update-secret(-ok))
are checked against pamqp, which is generated from RabbitMQ's codegen JSON.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pamqp.commands
import pytest

import codec
from codec import constants, spec
from tests.conftest import require

SPEC_XML = Path("/usr/share/amqp/specs/0-9-1-rabbit/amqp0-9-1.stripped.extended.xml")
XML_METHOD_COUNT = 60

# Methods we declare that the 2013 XML does not have: checked against pamqp's ids instead.
NOT_IN_XML = (
    "connection.blocked",
    "connection.unblocked",
    "connection.update-secret",
    "connection.update-secret-ok",
)

# XML field name -> our field name, where replacing "-" by "_" is not enough. Our names follow
# RabbitMQ's codegen JSON as pamqp spells them: the reserved fields keep the names they had
# before 0-9-1 reserved them, Python keywords/builtins and `type` are renamed. Keys are
# (method or "basic.properties" or "*" for every method, XML field name).
FIELD_RENAMES: dict[tuple[str, str], str] = {
    **{
        (method, "reserved-1"): "ticket"  # reserved-1 (short) of exchange/queue/basic methods
        for method in (
            "exchange.declare", "exchange.delete", "exchange.bind", "exchange.unbind",
            "queue.declare", "queue.bind", "queue.purge", "queue.delete", "queue.unbind",
            "basic.consume", "basic.publish", "basic.get",
        )
    },
    ("connection.open", "reserved-1"): "capabilities",
    ("connection.open", "reserved-2"): "insist",
    ("connection.open-ok", "reserved-1"): "known_hosts",
    ("channel.open", "reserved-1"): "out_of_band",
    ("channel.open-ok", "reserved-1"): "channel_id",
    ("basic.get-empty", "reserved-1"): "cluster_id",
    ("exchange.declare", "type"): "exchange_type",
    ("basic.qos", "global"): "global_",
    ("*", "no-wait"): "nowait",
    ("basic.properties", "type"): "message_type",
    ("basic.properties", "reserved"): "cluster_id",
}  # fmt: skip

# Documented deviations from the XML's metadata: (method, attribute) -> (XML value, ours, why).
DEVIATIONS: dict[tuple[str, str], tuple[Any, Any, str]] = {
    ("basic.recover", "synchronous"): (
        False,
        True,
        "the XML declares basic.recover asynchronous without a response, but RabbitMQ "
        "answers it with basic.recover-ok (and the XML has recover-ok as a synchronous reply)",
    ),
    ("basic.recover", "responses"): ((), ("basic.recover-ok",), "see basic.recover synchronous"),
}
# channel.flow-ok: the XML does not mark it synchronous, and neither do we (no deviation).

# The one reply code we declare beyond the XML, from RabbitMQ's codegen JSON (soft error).
REPLY_CODES_NOT_IN_XML = {"NO_ROUTE": 312}

# The XML constants that are not reply codes ("frame-error" 501 is a reply code).
FRAME_CONSTANTS = {
    "frame-method",
    "frame-header",
    "frame-body",
    "frame-heartbeat",
    "frame-min-size",
    "frame-end",
}
XML_TYPES = {"octet", "short", "long", "longlong", "shortstr", "longstr", "bit", "table", "timestamp"}


@dataclass(frozen=True)
class XmlField:
    name: str
    type: str


@dataclass(frozen=True)
class XmlMethod:
    name: str  # "basic.deliver"
    class_id: int
    method_id: int
    synchronous: bool
    content: bool
    responses: tuple[str, ...]
    fields: tuple[XmlField, ...]


@dataclass(frozen=True)
class XmlSpec:
    root: ET.Element
    domains: dict[str, str]
    methods: dict[str, XmlMethod]
    properties: tuple[XmlField, ...]
    constants: dict[str, tuple[int, str | None]]  # name -> (value, class attribute)


def _field(element: ET.Element, domains: dict[str, str]) -> XmlField:
    name = element.attrib["name"]
    if "type" in element.attrib:
        return XmlField(name, element.attrib["type"])
    return XmlField(name, domains[element.attrib["domain"]])


def _parse(path: Path) -> XmlSpec:
    root = ET.parse(path).getroot()
    domains = {d.attrib["name"]: d.attrib["type"] for d in root.findall("domain")}
    methods: dict[str, XmlMethod] = {}
    properties: tuple[XmlField, ...] = ()
    for cls in root.findall("class"):
        cname = cls.attrib["name"]
        if cname == "basic":
            properties = tuple(_field(f, domains) for f in cls.findall("field"))
        for m in cls.findall("method"):
            name = f"{cname}.{m.attrib['name']}"
            methods[name] = XmlMethod(
                name=name,
                class_id=int(cls.attrib["index"]),
                method_id=int(m.attrib["index"]),
                synchronous=m.attrib.get("synchronous") == "1",
                content=m.attrib.get("content") == "1",
                responses=tuple(f"{cname}.{r.attrib['name']}" for r in m.findall("response")),
                fields=tuple(_field(f, domains) for f in m.findall("field")),
            )
    consts = {
        c.attrib["name"]: (int(c.attrib["value"]), c.attrib.get("class")) for c in root.findall("constant")
    }
    return XmlSpec(root, domains, methods, properties, consts)


@pytest.fixture(scope="module")
def xml() -> XmlSpec:
    require(
        SPEC_XML.is_file(),
        f"{SPEC_XML} is missing: install the Debian package amqp-specs",
    )
    return _parse(SPEC_XML)


def our_name(method: str, xml_field: str) -> str:
    return (
        FIELD_RENAMES.get((method, xml_field))
        or FIELD_RENAMES.get(("*", xml_field))
        or xml_field.replace("-", "_")
    )


def our_type(domain: Any) -> str:
    return spec.DOMAIN_NAMES[id(domain)]


def _expect(method: str, attribute: str, xml_value: Any, ours: Any) -> None:
    """ours == xml_value, unless DEVIATIONS lists exactly this difference."""
    deviation = DEVIATIONS.get((method, attribute))
    if deviation is None:
        assert ours == xml_value, f"{method} {attribute}: ours {ours!r}, XML {xml_value!r}"
        return
    listed_xml, listed_ours, why = deviation
    assert (xml_value, ours) == (listed_xml, listed_ours), (
        f"{method} {attribute}: documented deviation ({why}) is stale: "
        f"XML {xml_value!r}, ours {ours!r}, listed {listed_xml!r} -> {listed_ours!r}"
    )


XML_METHOD_NAMES = [m.name for m in spec.METHODS if m.name not in NOT_IN_XML]


# --- methods -------------------------------------------------------------------------
def test_xml_has_the_methods_we_expect(xml: XmlSpec) -> None:
    assert len(xml.methods) == XML_METHOD_COUNT
    ours = {m.name for m in spec.METHODS}
    assert len(ours) == len(spec.METHODS) == len(codec.METHOD_CLASSES) == 64
    assert set(xml.methods) - ours == set(), "XML methods we do not declare"
    assert ours - set(xml.methods) == set(NOT_IN_XML), "methods we declare beyond the XML"


@pytest.mark.parametrize("name", XML_METHOD_NAMES)
def test_method_matches_xml(xml: XmlSpec, name: str) -> None:
    x = xml.methods[name]
    decl = spec.METHODS_BY_NAME[name]
    assert (decl.class_id, decl.method_id) == (x.class_id, x.method_id)
    assert decl.class_id == spec.CLASS_IDS[name.split(".")[0]]
    expected = [(our_name(name, f.name), f.type) for f in x.fields]
    assert [(n, our_type(d)) for n, d in decl.fields] == expected
    assert decl.content == x.content
    _expect(name, "synchronous", x.synchronous, decl.synchronous)
    _expect(name, "responses", x.responses, decl.responses)

    # The generated class says the same as the declaration (and hence as the XML).
    cls = codec.METHOD_CLASSES[decl.index]
    assert name == cls.NAME
    assert (x.class_id, x.method_id, decl.index) == (cls.CLASS_ID, cls.METHOD_ID, cls.INDEX)
    assert list(cls._fields) == [n for n, _t in expected]
    assert x.content == cls.HAS_CONTENT
    _expect(name, "synchronous", x.synchronous, cls.SYNCHRONOUS)
    _expect(name, "responses", x.responses, tuple(cls.RESPONSES))


def _pamqp_to_ours(name: str) -> str:
    """pamqp's name to ours: Connection.UpdateSecretOk -> connection.update-secret-ok."""
    cls, method = name.split(".")
    return f"{cls.lower()}.{re.sub(r'(?<!^)(?=[A-Z])', '-', method).lower()}"


@pytest.mark.parametrize("name", NOT_IN_XML)
def test_extension_method_matches_pamqp(xml: XmlSpec, name: str) -> None:
    """RabbitMQ's additions after the 2013 XML: ids, fields and types as pamqp (codegen JSON)."""
    assert name not in xml.methods, f"{name} is in the XML now: check it there (NOT_IN_XML)"
    decl = spec.METHODS_BY_NAME[name]
    theirs = pamqp.commands.INDEX_MAPPING[decl.index]
    assert _pamqp_to_ours(theirs.name) == name
    assert (theirs.frame_id, theirs.index) == (decl.method_id, decl.index)
    assert [(n, our_type(d)) for n, d in decl.fields] == [
        (a, theirs.amqp_type(a)) for a in theirs.attributes()
    ]
    # pamqp marks only requests synchronous (not their -ok replies, unlike the XML); compare
    # what it does say: the responses, and synchronous for the methods that have responses.
    assert decl.responses == tuple(_pamqp_to_ours(r) for r in theirs.valid_responses)
    if theirs.valid_responses:
        assert decl.synchronous == theirs.synchronous
    cls = codec.METHOD_CLASSES[decl.index]
    assert (name, 10, decl.method_id) == (cls.NAME, cls.CLASS_ID, cls.METHOD_ID)
    assert list(cls._fields) == theirs.attributes()
    assert cls.HAS_CONTENT is False


def test_field_renames_are_all_used(xml: XmlSpec) -> None:
    """Every FIELD_RENAMES entry applies to some XML field, and every reserved field is renamed."""
    used: set[tuple[str, str]] = set()
    for m in xml.methods.values():
        for f in m.fields:
            for key in ((m.name, f.name), ("*", f.name)):
                if key in FIELD_RENAMES:
                    used.add(key)
                    break
            else:
                assert not f.name.startswith("reserved"), f"{m.name} {f.name} has no name mapping"
    for f in xml.properties:
        if ("basic.properties", f.name) in FIELD_RENAMES:
            used.add(("basic.properties", f.name))
    assert set(FIELD_RENAMES) - used == set()


def test_domain_types_are_the_ones_we_know(xml: XmlSpec) -> None:
    assert set(xml.domains.values()) == XML_TYPES
    assert set(spec.DOMAIN_NAMES.values()) == XML_TYPES
    field_types = {f.type for m in xml.methods.values() for f in m.fields}
    assert field_types <= XML_TYPES


# --- basic properties ----------------------------------------------------------------
def test_basic_properties_match_xml(xml: XmlSpec) -> None:
    assert len(xml.properties) == 14
    expected = [(our_name("basic.properties", f.name), f.type) for f in xml.properties]
    assert [(n, our_type(d)) for n, d in spec.PROPERTIES] == expected
    assert list(codec.BasicProperties._fields) == [n for n, _t in expected]
    # Property flags: first property is bit 15, the 14th bit 2 (0-9-1 §4.2.6.1).
    assert [spec.PROPERTY_FLAG[n] for n, _t in expected] == [1 << (15 - i) for i in range(14)]
    assert spec.ILLEGAL_PROPERTY_FLAGS == 0x0003
    basic = next(c for c in xml.root.findall("class") if c.attrib["name"] == "basic")
    assert int(basic.attrib["index"]) == spec.BASIC_CLASS_ID == 60


def test_class_ids_match_xml(xml: XmlSpec) -> None:
    assert {c.attrib["name"]: int(c.attrib["index"]) for c in xml.root.findall("class")} == spec.CLASS_IDS


# --- constants -----------------------------------------------------------------------
def _reply_constants(xml: XmlSpec) -> dict[str, tuple[int, str | None]]:
    return {n: v for n, v in xml.constants.items() if n not in FRAME_CONSTANTS}


def test_reply_codes_match_xml(xml: XmlSpec) -> None:
    replies = _reply_constants(xml)
    assert {n.upper().replace("-", "_"): v for n, (v, _c) in replies.items()} == {
        code.name: code.value for code in codec.ReplyCode if code.name not in REPLY_CODES_NOT_IN_XML
    }
    for name, value in REPLY_CODES_NOT_IN_XML.items():
        assert codec.ReplyCode[name] == value
        assert value not in {v for v, _c in replies.values()}


def test_reply_code_error_classes_match_xml(xml: XmlSpec) -> None:
    classes = {}
    for name, (value, klass) in _reply_constants(xml).items():
        code = codec.ReplyCode(value)
        assert code.name == name.upper().replace("-", "_")
        classes[code.name] = klass
        if klass == "soft-error":
            assert code.is_soft_error and not code.is_hard_error, code
        elif klass == "hard-error":
            assert code.is_hard_error and not code.is_soft_error, code
        else:  # reply-success: neither
            assert klass is None and name == "reply-success"
            assert not code.is_soft_error and not code.is_hard_error
    assert sum(k is not None for k in classes.values()) == 17  # 6 soft, 11 hard
    # NO_ROUTE is a soft error in RabbitMQ's codegen JSON.
    assert codec.ReplyCode.NO_ROUTE.is_soft_error and not codec.ReplyCode.NO_ROUTE.is_hard_error


def test_frame_constants_match_xml(xml: XmlSpec) -> None:
    c = {n: v for n, (v, _k) in xml.constants.items() if n in FRAME_CONSTANTS}
    assert set(c) == FRAME_CONSTANTS
    assert c["frame-min-size"] == constants.FRAME_MIN_SIZE == codec.FRAME_MIN_SIZE == 4096
    assert c["frame-end"] == constants.FRAME_END == constants.FRAME_END_BYTE[0] == 206
    assert (
        (c["frame-method"], c["frame-header"], c["frame-body"], c["frame-heartbeat"])
        == (
            codec.FrameType.METHOD,
            codec.FrameType.HEADER,
            codec.FrameType.BODY,
            codec.FrameType.HEARTBEAT,
        )
        == (1, 2, 3, 8)
    )
    assert {int(t) for t in codec.FrameType} == {1, 2, 3, 8}


def test_protocol_version_matches_xml(xml: XmlSpec) -> None:
    a = xml.root.attrib
    version = bytes([int(a["major"]), int(a["minor"]), int(a["revision"])])
    assert codec.PROTOCOL_HEADER == b"AMQP\x00" + version == b"AMQP\x00\x00\x09\x01"
