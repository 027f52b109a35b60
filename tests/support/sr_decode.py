"""Reads topics to their end with Confluent's own Python client and decodes
every record's key and value through the schema registry: a client that is
not walrelay's (tests/it/schema_registry.rs runs it).

    sr_decode.py BROKERS REGISTRY_URL avro|json_schema[:schemas] TOPIC...

Prints one JSON object per record: topic, partition, offset, the `id`
header, every header as text (`headers`), the key and value schema ids
(from the wire format's prefix), and the decoded key and value; with
`:schemas`, also the key and value schemas' texts as the registry holds
them (`key_schema`, `value_schema`). Decoded values that JSON has no form
for: bytes as standard base64, decimals as their text, dates and times in
ISO 8601. Exits non-zero on any record it cannot decode.
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
