"""Reads topics to their end with Confluent's own Python client and decodes
every record's key and value through the schema registry: a client that is
not walrelay's (tests/it/schema_registry.rs runs it).

    sr_decode.py BROKERS REGISTRY_URL avro|json_schema|protobuf[:schemas] TOPIC...

Prints one JSON object per record: topic, partition, offset, the `id`
header, every header as text (`headers`), the key and value schema ids
(from the wire format's prefix), and the decoded key and value; with
`:schemas`, also the key and value schemas' texts as the registry holds
them (`key_schema`, `value_schema`). Decoded values that JSON has no form
for: bytes as standard base64, decimals as their text, dates and times in
ISO 8601. Exits non-zero on any record it cannot decode.

Protobuf: each schema id's text, as the registry holds it, is compiled by
protoc (grpcio-tools; Confluent's `confluent/meta.proto` and
`confluent/type/decimal.proto` given as the descriptors confluent-kafka
ships) into a message class, the file's first message — the one the
message index `[0]` names (the deserializer reads and checks the framing,
then parses the body with that class). Decoded messages print as objects of
their fields: a field without presence at its value (also the default), one
with presence and unset as null, repeated fields as lists, an `Item_*`
element wrapper as its `value`, a `confluent.type.Decimal` as its text.
"""

import base64
import datetime
import decimal
import json
import struct
import sys

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext


def plain(value):
    """JSON's form of what the deserializers return beyond JSON's types."""
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (datetime.date, datetime.time, datetime.datetime)):
        return value.isoformat()
    raise TypeError(f"no JSON form for {type(value)}")


def protobuf_deserializer(schema_text):
    """A callable (raw, ctx) -> plain value decoding Confluent-framed
    Protobuf with confluent-kafka's ProtobufDeserializer, the message class
    compiled from the writer schema's text."""
    import os
    import tempfile

    from google.protobuf import descriptor_pb2, descriptor_pool
    from google.protobuf.message_factory import GetMessageClass
    from grpc_tools import protoc
    from confluent_kafka.schema_registry.confluent import meta_pb2
    from confluent_kafka.schema_registry.confluent.type import decimal_pb2
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer

    deserializers = {}

    def compile_schema(schema_id):
        text = schema_text(schema_id)
        work = tempfile.mkdtemp(prefix="sr-proto-")
        name = f"schema_{schema_id}.proto"
        with open(os.path.join(work, name), "w", encoding="utf-8") as f:
            f.write(text)
        deps = descriptor_pb2.FileDescriptorSet()
        for module in (descriptor_pb2, meta_pb2, decimal_pb2):
            module.DESCRIPTOR.CopyToProto(deps.file.add())
        with open(os.path.join(work, "deps.pb"), "wb") as f:
            f.write(deps.SerializeToString())
        out = os.path.join(work, "out.pb")
        rc = protoc.main([
            "protoc", f"--proto_path={work}", f"--descriptor_set_in={work}/deps.pb",
            f"--descriptor_set_out={out}", os.path.join(work, name),
        ])
        if rc != 0:
            raise SystemExit(f"protoc refused schema {schema_id}:\n{text}")
        compiled = descriptor_pb2.FileDescriptorSet()
        with open(out, "rb") as f:
            compiled.ParseFromString(f.read())
        pool = descriptor_pool.DescriptorPool()
        for dep in deps.file:
            pool.Add(dep)
        fdp = compiled.file[0]
        pool.Add(fdp)
        first = fdp.message_type[0].name
        full = f"{fdp.package}.{first}" if fdp.package else first
        cls = GetMessageClass(pool.FindMessageTypeByName(full))
        return ProtobufDeserializer(cls, {"use.deprecated.format": False})

    def decode(raw, _ctx):
        schema_id = struct.unpack(">bI", raw[:5])[1]
        if schema_id not in deserializers:
            deserializers[schema_id] = compile_schema(schema_id)
        return protobuf_plain(deserializers[schema_id](raw, None))

    return decode


def protobuf_plain(msg):
    """A decoded message as JSON-like values (module doc)."""
    desc = msg.DESCRIPTOR
    if desc.full_name == "confluent.type.Decimal":
        unscaled = int.from_bytes(msg.value, "big", signed=True)
        return decimal.Decimal(unscaled).scaleb(-msg.scale)
    out = {}
    for f in desc.fields:
        repeated = getattr(f, "is_repeated", None)
        if repeated is None:
            repeated = f.label == f.LABEL_REPEATED
        value = getattr(msg, f.name)
        if repeated:
            out[f.name] = [protobuf_plain(v) if f.message_type else v for v in value]
        elif f.has_presence and not msg.HasField(f.name):
            out[f.name] = None
        else:
            out[f.name] = protobuf_plain(value) if f.message_type else value
    if desc.name.startswith("Item_") and list(out) == ["value"]:
        return out["value"]
    return out


def main():
    brokers, url, fmt, topics = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    fmt, _, extra = fmt.partition(":")
    with_schemas = extra == "schemas"
    # A request the registry never answers must not hang the test: the
    # client's default is no timeout; with one it retries, then fails.
    registry = SchemaRegistryClient({"url": url, "timeout": 20})
    schema_texts = {}

    def schema_text(schema_id):
        if schema_id not in schema_texts:
            schema_texts[schema_id] = registry.get_schema(schema_id).schema_str
        return schema_texts[schema_id]

    if fmt == "avro":
        deserializer = AvroDeserializer(registry)
    elif fmt == "protobuf":
        deserializer = protobuf_deserializer(schema_text)
    elif fmt == "json_schema":
        deserializer = JSONDeserializer(None, schema_registry_client=registry)
    else:
        raise SystemExit(f"unknown format {fmt}")
    consumer = Consumer({
        "bootstrap.servers": brokers,
        "group.id": "sr-decode",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
    })
    assignment = []
    for topic in topics:
        md = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if md is None or md.error is not None:
            continue
        for p in md.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high > low:
                assignment.append(TopicPartition(topic, p, low))
    if not assignment:
        return
    consumer.assign(assignment)
    open_partitions = {(tp.topic, tp.partition) for tp in assignment}
    while open_partitions:
        msg = consumer.poll(10)
        if msg is None:
            raise SystemExit("no record within 10 s before the end of the topics")
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                open_partitions.discard((msg.topic(), msg.partition()))
                continue
            raise SystemExit(f"consumer error: {msg.error()}")
        def decode(raw, ctx):
            return deserializer(raw, ctx) if raw is not None else None

        key_ctx = SerializationContext(msg.topic(), MessageField.KEY, msg.headers())
        value_ctx = SerializationContext(msg.topic(), MessageField.VALUE, msg.headers())
        raw_key, raw_value = msg.key(), msg.value()
        headers = dict(msg.headers() or [])
        record = {
            "topic": msg.topic(),
            "partition": msg.partition(),
            "offset": msg.offset(),
            "id": headers.get("id", b"").decode(),
            "headers": {k: (v or b"").decode() for k, v in headers.items()},
            "key_schema_id": struct.unpack(">bI", raw_key[:5])[1] if raw_key else None,
            "value_schema_id": struct.unpack(">bI", raw_value[:5])[1] if raw_value else None,
            "key": decode(raw_key, key_ctx),
            "value": decode(raw_value, value_ctx),
        }
        if with_schemas:
            for part in ("key", "value"):
                schema_id = record[f"{part}_schema_id"]
                record[f"{part}_schema"] = schema_text(schema_id) if schema_id else None
        print(json.dumps(record, default=plain))
    consumer.close()


if __name__ == "__main__":
    main()
