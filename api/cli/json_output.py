"""Operator replies as JSON documents, for ``--json``."""

from __future__ import annotations

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

_INT64 = {FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_SINT64,
          FieldDescriptor.TYPE_FIXED64, FieldDescriptor.TYPE_SFIXED64}


def message_document(message: Message) -> dict:
    """A reply as a JSON document: the proto's field names, every field
    (defaults too), and 64-bit integers as numbers (the proto JSON mapping
    writes them as strings: ``"num_records": "50"``)."""
    document = json_format.MessageToDict(message, preserving_proto_field_name=True,
                                         always_print_fields_with_no_presence=True)
    _integers_as_numbers(message.DESCRIPTOR, document)
    return document


def _integers_as_numbers(descriptor: Descriptor, document: dict) -> None:
    for field in descriptor.fields:
        if field.name not in document:
            continue
        value = document[field.name]
        if field.type in _INT64:
            document[field.name] = ([int(v) for v in value] if isinstance(value, list)
                                    else int(value))
        elif field.message_type is not None and not field.message_type.GetOptions().map_entry:
            for each in value if isinstance(value, list) else [value]:
                if isinstance(each, dict):
                    _integers_as_numbers(field.message_type, each)
