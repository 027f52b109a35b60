"""Reads topics to their end with Confluent's own Python client and decodes
every record's key and value through the schema registry: a client that is
not walrelay's (tests/it/schema_registry.rs runs it).

    sr_decode.py BROKERS REGISTRY_URL avro|json_schema TOPIC...

Prints one JSON object per record: topic, partition, offset, the `id`
header, the key and value schema ids (from the wire format's prefix), and
the decoded key and value. Exits non-zero on any record it cannot decode.
"""

import json
import struct
import sys

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext


def main():
    brokers, url, fmt, topics = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    registry = SchemaRegistryClient({"url": url})
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
        key_ctx = SerializationContext(msg.topic(), MessageField.KEY, msg.headers())
        value_ctx = SerializationContext(msg.topic(), MessageField.VALUE, msg.headers())
        raw_key, raw_value = msg.key(), msg.value()
        headers = dict(msg.headers() or [])
        print(json.dumps({
            "topic": msg.topic(),
            "partition": msg.partition(),
            "offset": msg.offset(),
            "id": headers.get("id", b"").decode(),
            "key_schema_id": struct.unpack(">bI", raw_key[:5])[1] if raw_key else None,
            "value_schema_id": struct.unpack(">bI", raw_value[:5])[1] if raw_value else None,
            "key": deserializer(raw_key, key_ctx),
            "value": deserializer(raw_value, value_ctx) if raw_value is not None else None,
        }))
    consumer.close()


if __name__ == "__main__":
    main()
