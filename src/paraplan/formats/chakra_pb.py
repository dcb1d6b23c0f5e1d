"""The Chakra execution-trace schema (`et_def.proto`, package ChakraProtoMsg, schema 0.0.4) and a small
protobuf wire-format codec for it, so paraplan writes traces ASTRA-sim reads without depending on
`protobuf`.

A trace file is a `GlobalMetadata` message and then one `Node` message per operator, each preceded by its
length as a varint (chakra's `encode_message`, i.e. protobuf's length-delimited stream). Field numbers:

    message AttributeProto { string name = 1; string doc_string = 2;
        oneof value { double double_val = 3; DoubleList double_list = 4; float float_val = 5; ...
                      int32 int32_val = 7; Int32List int32_list = 8; int64 int64_val = 9; Int64List int64_list = 10;
                      uint32 uint32_val = 11; ...; uint64 uint64_val = 13; Uint64List uint64_list = 14; ...
                      bool bool_val = 27; BoolList bool_list = 28; string string_val = 29; StringList string_list = 30;
                      bytes bytes_val = 31; BytesList bytes_list = 32; } }   // each XList: repeated X values = 1
    enum NodeType { INVALID_NODE = 0; METADATA_NODE = 1; MEM_LOAD_NODE = 2; MEM_STORE_NODE = 3; COMP_NODE = 4;
                    COMM_SEND_NODE = 5; COMM_RECV_NODE = 6; COMM_COLL_NODE = 7; }
    enum CollectiveCommType { ALL_REDUCE = 0; REDUCE = 1; ALL_GATHER = 2; GATHER = 3; SCATTER = 4; BROADCAST = 5;
                              ALL_TO_ALL = 6; REDUCE_SCATTER = 7; REDUCE_SCATTER_BLOCK = 8; BARRIER = 9; }
    message GlobalMetadata { string version = 1; repeated AttributeProto attr = 2; }
    message Node { uint64 id = 1; string name = 2; NodeType type = 3; repeated uint64 ctrl_deps = 4;
                   repeated uint64 data_deps = 5; uint64 start_time_micros = 6; uint64 duration_micros = 7;
                   IOInfo inputs = 8; IOInfo outputs = 9; repeated AttributeProto attr = 10; }
    message IOInfo { string values = 1; string shapes = 2; string types = 3; }

`message_classes()` builds the same schema as real protobuf classes when the `protobuf` package is installed.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import Any

SCHEMA_VERSION = "0.0.4"


class NodeType(IntEnum):
    INVALID_NODE = 0
    METADATA_NODE = 1
    MEM_LOAD_NODE = 2
    MEM_STORE_NODE = 3
    COMP_NODE = 4
    COMM_SEND_NODE = 5
    COMM_RECV_NODE = 6
    COMM_COLL_NODE = 7


class CollectiveCommType(IntEnum):
    ALL_REDUCE = 0
    REDUCE = 1
    ALL_GATHER = 2
    GATHER = 3
    SCATTER = 4
    BROADCAST = 5
    ALL_TO_ALL = 6
    REDUCE_SCATTER = 7
    REDUCE_SCATTER_BLOCK = 8
    BARRIER = 9


# AttributeProto oneof members paraplan writes and reads: kind -> (field number, wire type).
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
SCALAR_FIELDS: dict[str, tuple[int, int]] = {
    "double": (3, _I64),
    "float": (5, _I32),
    "int32": (7, _VARINT),
    "int64": (9, _VARINT),
    "uint32": (11, _VARINT),
    "uint64": (13, _VARINT),
    "bool": (27, _VARINT),
    "string": (29, _LEN),
    "bytes": (31, _LEN),
}
LIST_FIELDS: dict[str, int] = {
    "double_list": 4,
    "int32_list": 8,
    "int64_list": 10,
    "uint64_list": 14,
    "bool_list": 28,
    "string_list": 30,
}
_BY_NUMBER = {num: kind for kind, (num, _) in SCALAR_FIELDS.items()} | {n: k for k, n in LIST_FIELDS.items()}


@dataclass(frozen=True, slots=True)
class Attr:
    name: str
    kind: str  # a key of SCALAR_FIELDS or LIST_FIELDS
    value: Any


@dataclass(slots=True)
class Node:
    id: int
    name: str
    type: NodeType
    ctrl_deps: list[int] = field(default_factory=list)
    data_deps: list[int] = field(default_factory=list)
    start_time_micros: int = 0
    duration_micros: int = 0
    attrs: list[Attr] = field(default_factory=list)

    def attr(self, name: str) -> Any:
        for a in self.attrs:
            if a.name == name:
                return a.value
        raise KeyError(name)


@dataclass(slots=True)
class GlobalMetadata:
    version: str = SCHEMA_VERSION
    attrs: list[Attr] = field(default_factory=list)


# ----------------------------------------------------------------------------- encoding
def varint(value: int) -> bytes:
    """Base-128 varint; negative numbers as their 64-bit two's complement (protobuf int32/int64)."""
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(number: int, wire: int) -> bytes:
    return varint(number << 3 | wire)


def _len_field(number: int, payload: bytes) -> bytes:
    return _key(number, _LEN) + varint(len(payload)) + payload


def _scalar(kind: str, value: Any) -> bytes:
    """The bare encoding of one value of `kind` (no key)."""
    if kind == "double":
        return struct.pack("<d", float(value))
    if kind == "float":
        return struct.pack("<f", float(value))
    if kind in ("string", "bytes"):
        data = value.encode() if isinstance(value, str) else bytes(value)
        return varint(len(data)) + data
    return varint(int(bool(value)) if kind == "bool" else int(value))


def encode_attr(attr: Attr) -> bytes:
    out = _len_field(1, attr.name.encode())
    if attr.kind in SCALAR_FIELDS:
        number, wire = SCALAR_FIELDS[attr.kind]
        return out + _key(number, wire) + _scalar(attr.kind, attr.value)  # oneof: written even when zero
    item = attr.kind.removesuffix("_list")
    if item == "string":
        body = b"".join(_len_field(1, str(v).encode()) for v in attr.value)
    else:  # packed repeated scalars
        packed = b"".join(_scalar(item, v) for v in attr.value)
        body = _len_field(1, packed) if packed else b""
    return out + _len_field(LIST_FIELDS[attr.kind], body)


def attr_field(attr: Attr) -> bytes:
    """One `attr` entry of a Node (field 10): appending it to an encoded Node adds the attribute."""
    return _len_field(10, encode_attr(attr))


def _packed(number: int, values: Iterable[int]) -> bytes:
    payload = b"".join(varint(v) for v in values)
    return _len_field(number, payload) if payload else b""


def encode_node(node: Node) -> bytes:
    out = bytearray()
    if node.id:
        out += _key(1, _VARINT) + varint(node.id)
    if node.name:
        out += _len_field(2, node.name.encode())
    if node.type:
        out += _key(3, _VARINT) + varint(int(node.type))
    out += _packed(4, node.ctrl_deps)
    out += _packed(5, node.data_deps)
    if node.start_time_micros:
        out += _key(6, _VARINT) + varint(node.start_time_micros)
    if node.duration_micros:
        out += _key(7, _VARINT) + varint(node.duration_micros)
    for attr in node.attrs:
        out += attr_field(attr)
    return bytes(out)


def encode_metadata(meta: GlobalMetadata) -> bytes:
    out = _len_field(1, meta.version.encode()) if meta.version else b""
    return out + b"".join(_len_field(2, encode_attr(a)) for a in meta.attrs)


def delimited(message: bytes) -> bytes:
    """chakra's `encode_message`: the message's size as a varint, then the message."""
    return varint(len(message)) + message


def write_trace(path: str | Path, meta: GlobalMetadata, encoded_nodes: Iterable[bytes]) -> None:
    with open(path, "wb") as out:
        out.write(delimited(encode_metadata(meta)))
        for message in encoded_nodes:
            out.write(delimited(message))


# ----------------------------------------------------------------------------- decoding
def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def fields(data: bytes) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, raw value) of every field of one message."""
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == _VARINT:
            value, pos = _read_varint(data, pos)
        elif wire == _I64:
            value, pos = data[pos : pos + 8], pos + 8
        elif wire == _I32:
            value, pos = data[pos : pos + 4], pos + 4
        elif wire == _LEN:
            size, pos = _read_varint(data, pos)
            value, pos = data[pos : pos + size], pos + size
        else:
            raise ValueError(f"unsupported wire type {wire}")
        yield number, wire, value


def _signed(value: int) -> int:
    """A varint read back as a signed 64-bit integer."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _scalar_value(kind: str, wire: int, raw: Any) -> Any:
    if kind == "double":
        return struct.unpack("<d", raw)[0]
    if kind == "float":
        return struct.unpack("<f", raw)[0]
    if kind == "string":
        return bytes(raw).decode()
    if kind == "bytes":
        return bytes(raw)
    if kind == "bool":
        return bool(raw)
    if kind in ("int32", "int64"):
        return _signed(raw)
    return raw


def _varints(payload: bytes) -> list[int]:
    out, pos = [], 0
    while pos < len(payload):
        value, pos = _read_varint(payload, pos)
        out.append(value)
    return out


def decode_attr(data: bytes) -> Attr:
    name, kind, value = "", "", None
    for number, wire, raw in fields(data):
        if number == 1:
            name = bytes(raw).decode()
        elif number in _BY_NUMBER:
            kind = _BY_NUMBER[number]
            if kind in SCALAR_FIELDS:
                value = _scalar_value(kind, wire, raw)
            else:
                item = kind.removesuffix("_list")
                items: list[Any] = []
                for _, inner_wire, inner in fields(raw):
                    if item == "string":
                        items.append(bytes(inner).decode())
                    elif inner_wire == _LEN and item != "double":
                        items += [_scalar_value(item, _VARINT, v) for v in _varints(inner)]
                    elif item == "double":
                        items += [v[0] for v in struct.iter_unpack("<d", inner)]
                    else:
                        items.append(_scalar_value(item, inner_wire, inner))
                value = items
    return Attr(name, kind, value)


def decode_node(data: bytes) -> Node:
    node = Node(id=0, name="", type=NodeType.INVALID_NODE)
    for number, wire, raw in fields(data):
        if number == 1:
            node.id = raw
        elif number == 2:
            node.name = bytes(raw).decode()
        elif number == 3:
            node.type = NodeType(raw)
        elif number in (4, 5):
            deps = _varints(raw) if wire == _LEN else [raw]
            (node.ctrl_deps if number == 4 else node.data_deps).extend(deps)
        elif number == 6:
            node.start_time_micros = raw
        elif number == 7:
            node.duration_micros = raw
        elif number == 10:
            node.attrs.append(decode_attr(raw))
    return node


def decode_metadata(data: bytes) -> GlobalMetadata:
    meta = GlobalMetadata(version="")
    for number, _, raw in fields(data):
        if number == 1:
            meta.version = bytes(raw).decode()
        elif number == 2:
            meta.attrs.append(decode_attr(raw))
    return meta


def messages(data: bytes) -> Iterator[bytes]:
    """The messages of a length-delimited stream."""
    pos = 0
    while pos < len(data):
        size, pos = _read_varint(data, pos)
        if pos + size > len(data):
            raise ValueError("truncated message")
        yield data[pos : pos + size]
        pos += size


def read_trace(path: str | Path) -> tuple[GlobalMetadata, list[Node]]:
    stream = messages(Path(path).read_bytes())
    meta = decode_metadata(next(stream))
    return meta, [decode_node(m) for m in stream]


# ----------------------------------------------------------------------------- real protobuf classes
def message_classes() -> dict[str, type]:
    """GlobalMetadata, Node and AttributeProto as `protobuf` message classes built from this schema at run
    time (needs the optional `protobuf` package): to cross-check files or to work with chakra's tools."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="paraplan_et_def.proto", package="ChakraProtoMsg", syntax="proto3")
    scalar_types = {
        "double": f.TYPE_DOUBLE,
        "float": f.TYPE_FLOAT,
        "int32": f.TYPE_INT32,
        "int64": f.TYPE_INT64,
        "uint32": f.TYPE_UINT32,
        "uint64": f.TYPE_UINT64,
        "bool": f.TYPE_BOOL,
        "string": f.TYPE_STRING,
        "bytes": f.TYPE_BYTES,
    }
    for kind in LIST_FIELDS:
        item = kind.removesuffix("_list")
        msg = fdp.message_type.add(name=item.capitalize() + "List")
        msg.field.add(name="values", number=1, type=scalar_types[item], label=f.LABEL_REPEATED)
    attr = fdp.message_type.add(name="AttributeProto")
    attr.field.add(name="name", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    attr.field.add(name="doc_string", number=2, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    attr.oneof_decl.add(name="value")
    for kind, (number, _) in SCALAR_FIELDS.items():
        attr.field.add(
            name=f"{kind}_val", number=number, type=scalar_types[kind], label=f.LABEL_OPTIONAL, oneof_index=0
        )
    for kind, number in LIST_FIELDS.items():
        type_name = ".ChakraProtoMsg." + kind.removesuffix("_list").capitalize() + "List"
        attr.field.add(
            name=kind, number=number, type=f.TYPE_MESSAGE, type_name=type_name, label=f.LABEL_OPTIONAL, oneof_index=0
        )
    node_type = fdp.enum_type.add(name="NodeType")
    for member in NodeType:
        node_type.value.add(name=member.name, number=member.value)
    coll = fdp.enum_type.add(name="CollectiveCommType")
    for member in CollectiveCommType:
        coll.value.add(name=member.name, number=member.value)
    meta = fdp.message_type.add(name="GlobalMetadata")
    meta.field.add(name="version", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    meta.field.add(
        name="attr", number=2, type=f.TYPE_MESSAGE, type_name=".ChakraProtoMsg.AttributeProto", label=f.LABEL_REPEATED
    )
    io = fdp.message_type.add(name="IOInfo")
    for number, name in enumerate(("values", "shapes", "types"), start=1):
        io.field.add(name=name, number=number, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    node = fdp.message_type.add(name="Node")
    node.field.add(name="id", number=1, type=f.TYPE_UINT64, label=f.LABEL_OPTIONAL)
    node.field.add(name="name", number=2, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    node.field.add(
        name="type", number=3, type=f.TYPE_ENUM, type_name=".ChakraProtoMsg.NodeType", label=f.LABEL_OPTIONAL
    )
    node.field.add(name="ctrl_deps", number=4, type=f.TYPE_UINT64, label=f.LABEL_REPEATED)
    node.field.add(name="data_deps", number=5, type=f.TYPE_UINT64, label=f.LABEL_REPEATED)
    node.field.add(name="start_time_micros", number=6, type=f.TYPE_UINT64, label=f.LABEL_OPTIONAL)
    node.field.add(name="duration_micros", number=7, type=f.TYPE_UINT64, label=f.LABEL_OPTIONAL)
    for number, name in ((8, "inputs"), (9, "outputs")):
        node.field.add(
            name=name, number=number, type=f.TYPE_MESSAGE, type_name=".ChakraProtoMsg.IOInfo", label=f.LABEL_OPTIONAL
        )
    node.field.add(
        name="attr", number=10, type=f.TYPE_MESSAGE, type_name=".ChakraProtoMsg.AttributeProto", label=f.LABEL_REPEATED
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"ChakraProtoMsg.{name}"))
        for name in ("GlobalMetadata", "Node", "AttributeProto", "IOInfo")
    }
