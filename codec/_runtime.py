"""Runtime support for the generated classes and fast path (`codec/_generated.py`).

Rules: no protocol facts here, only mechanics: the equality that includes the class (two
methods with equal field values are still different methods), and length-prefixed string
encoders that refuse what the wire cannot carry.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, ClassVar

from codec.errors import EncodeError

FieldTable = Mapping[str, Any]
EMPTY_TABLE: FieldTable = MappingProxyType({})
TableDecoder = Callable[[bytes, int], tuple[dict[str, Any], int]]
TableEncoder = Callable[[FieldTable], bytes]

_U32 = struct.Struct(">I")
_LENGTH_OCTET = tuple(bytes((i,)) for i in range(256))


class MethodBase:
    """Mixin of every generated method and property class: type-aware equality."""

    __slots__ = ()
    NAME: ClassVar[str] = ""
    CLASS_ID: ClassVar[int] = 0
    METHOD_ID: ClassVar[int] = 0
    INDEX: ClassVar[int] = 0
    SYNCHRONOUS: ClassVar[bool] = False
    RESPONSES: ClassVar[tuple[str, ...]] = ()
    HAS_CONTENT: ClassVar[bool] = False

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and tuple.__eq__(self, other)  # type: ignore

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash((type(self).__name__, tuple.__hash__(self)))  # type: ignore[arg-type]

    def fields(self) -> dict[str, Any]:
        """Field name -> value, in declaration order."""
        return dict(zip(self._fields, self, strict=True))  # type: ignore


def shortstr(value: str | bytes) -> bytes:
    """Length-octet-prefixed string; over 255 octets is an encode error."""
    raw = value.encode("utf-8", "surrogateescape") if value.__class__ is str else bytes(value)  # type: ignore[union-attr,arg-type]
    try:
        return _LENGTH_OCTET[len(raw)] + raw
    except IndexError:
        raise EncodeError(f"short string of {len(raw)} octets exceeds 255") from None


def longstr(value: bytes | str) -> bytes:
    """Length-long-prefixed string."""
    raw = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else bytes(value)
    if len(raw) > 0xFFFFFFFF:
        raise EncodeError("long string exceeds 2^32-1 octets")
    return _U32.pack(len(raw)) + raw
