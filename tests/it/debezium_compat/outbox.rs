//! Issue 24 item 17: walrelay's outbox records against Debezium's Outbox
//! Event Router (`io.debezium.transforms.outbox.EventRouter` on the
//! PostgreSQL connector, its default options), on the same rows of a table
//! with Debezium's default outbox columns, under the converters outbox
//! deployments run it with, and (issue 25 item 6) with envelope placement
//! and a header alias. One Kafka Connect worker runs seven connectors, one
//! per setup ([`SETUPS`]); every topic has [`PARTITIONS`]
//! partitions on both sides.
//!
//! Invariants checked (docs/compatibility.md, "Outbox records"):
//! - With `StringConverter` for key and value, Debezium's records are
//!   walrelay's byte for byte: the same topic (EventRouter's default route
//!   `outbox.event.<aggregatetype>` = walrelay's default template; walrelay's
//!   is given a prefix here so that both share one broker), key, value (a
//!   NULL payload: a tombstone on both sides), partition, and `id` header;
//!   each aggregate's records in the same order.
//! - Every record of every side is on the partition Kafka's murmur2 gives its
//!   key bytes ([`partition_of`]), so a different key encoding is a different
//!   partition — shown, not assumed, under the JSON converters.
//! - With `JsonConverter` (`schemas.enable=false`), and with it enabled (the
//!   converter's default, as in Kafka's `connect-standalone.properties`),
//!   Debezium's keys and values are exactly what [`Converters::expected`]
//!   says; with `table.expand.json.payload=true` an object payload is its
//!   JSON re-written, compared parsed (`null` and `[]` members aside).
//! - Issue 40 part 2: for each of those three setups, and the schemas one
//!   with `table.expand.json.payload=true` (the inferred schema in the
//!   envelope), a walrelay with the matching forms (`converter = "json"`;
//!   `"json"` with `expand_json_payload = true`; `"json_with_schema"`, also
//!   with `expand_json_payload = true`, [`walrelay_forms`]) writes
//!   Debezium's records byte for byte: key,
//!   value, partition, `id` (and placed `type`) header, each aggregate's
//!   records in the same order, every record compared ([`compare_bytes`]).
//! - Headers: Debezium writes `id` (the same bytes as walrelay's: the header
//!   converter, `SimpleHeaderConverter`, writes the uuid's text) and its
//!   `__debezium.context.*` headers; walrelay `id`, `type` (equal to
//!   Debezium's with `table.fields.additional.placement=type:header:type`),
//!   `walrelay.lsn`, and `walrelay.snapshot` on snapshot rows. Exactly those.
//! - Envelope placement (`type:envelope:eventType,aggregatetype:envelope`,
//!   and `type:header:eventType`; `StringConverter` keys, `JsonConverter`
//!   values, with and without `table.expand.json.payload`): a walrelay per
//!   setup with `envelope_columns`/`header_columns` aliases alike and
//!   `expand_json_payload` alike writes the same keys, partitions, `id` and
//!   `eventType` headers, members in the same order, and the same value
//!   bytes ([`compare_envelope`]).
//!
//! The rows: a snapshot of four, 40 aggregates over two aggregate types with
//! two events each, non-ASCII and non-BMP text, quotes and backslashes,
//! control characters in a key, an empty key, a NULL payload, a 192 KB
//! payload, scalar and array payloads, numbers of every Jackson type
//! (int, long, doubles written `1.0E20`, `1.0E-5`, `1.23456789E7`, `2.5`
//! from `2.50`), nested and empty objects, arrays of arrays, arrays of
//! objects of different members, an insert deleted in its own
//! transaction (published by both), an update and a delete (ignored by both).

use super::*;

use support::Consumed;

/// Partitions of every outbox topic, on both sides.
const PARTITIONS: i32 = 4;

/// Kafka's `Utils.murmur2`, which the Java producer's default partitioner
/// and librdkafka's `murmur2_random` (walrelay's) apply to the key bytes.
fn murmur2(data: &[u8]) -> u32 {
    const M: u32 = 0x5bd1_e995;
    let mut h: u32 = 0x9747_b28c ^ data.len() as u32;
    let chunks = data.chunks_exact(4);
    let tail = chunks.remainder();
    for c in chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^ (h >> 15)
}

/// The partition a keyed record gets among [`PARTITIONS`]: Java's
/// `toPositive(murmur2(key)) % partitions`.
fn partition_of(key: &[u8]) -> i32 {
    ((murmur2(key) & 0x7fff_ffff) % PARTITIONS as u32) as i32
}

#[test]
fn murmur2_is_kafkas() {
    // Kafka's own UtilsTest vectors.
    for (s, h) in [
        ("21", -973_932_308),
        ("foobar", -790_332_482),
        ("a-little-bit-long-string", -985_981_536),
        ("a-little-bit-longer-string", -1_486_304_829),
        (
            "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
            -58_897_971,
        ),
        ("abc", 479_470_107),
    ] {
        assert_eq!(murmur2(s.as_bytes()) as i32, h, "{s}");
    }
}

/// `s` as a JSON string the way Kafka Connect's JsonConverter (Jackson)
/// writes it: `"` and `\` escaped, control characters as `\t`, `\n`, `\r`,
/// `\b`, `\f` or `\u00XX`, each character outside the BMP as its two UTF-16
/// halves (`\uD83D\uDE00`, upper-case hex), everything else as UTF-8.
fn jackson_string(s: &str) -> String {
    use std::fmt::Write;
    let mut out = String::from('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if u32::from(c) < 0x20 => write!(out, "\\u{:04X}", u32::from(c)).unwrap(),
            c if u32::from(c) > 0xFFFF => {
                for half in c.encode_utf16(&mut [0; 2]) {
                    write!(out, "\\u{half:04X}").unwrap();
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[test]
fn jackson_strings() {
    assert_eq!(
        jackson_string("Zoë-😀 \"a\\b\"\t\r\u{1}"),
        r#""Zoë-\uD83D\uDE00 \"a\\b\"\t\r\u0001""#
    );
}

/// Debezium's default outbox columns, as its documentation lists them,
/// and columns of other types that only the envelope setups place
/// ([`ENVELOPE_MEMBERS`]; every row has their defaults).
const OUTBOX: &str = "CREATE TABLE outbox (
    id uuid PRIMARY KEY,
    aggregatetype varchar(255) NOT NULL,
    aggregateid varchar(255) NOT NULL,
    type varchar(255) NOT NULL,
    payload jsonb,
    attempt int DEFAULT 3,
    amount numeric(10,2) DEFAULT 12.50,
    occurred timestamptz DEFAULT '2026-12-03 10:01:48.123456+00',
    meta jsonb DEFAULT '{\"k\": 1}',
    flag bool);
  ALTER TABLE outbox OWNER TO walrelay;";

/// The envelope members beyond `payload`, `eventType` and `aggregatetype`
/// (placed in this order after them), and what every row's defaults are
/// in Debezium's type mapping: an `int4` a number, `numeric(10,2)` Kafka
/// Connect's `Decimal` (base64 of the unscaled 1250), `timestamptz` an ISO
/// string, `jsonb` a string, a NULL `bool` null.
const ENVELOPE_MEMBERS: &[(&str, &str)] = &[
    ("attempt", "3"),
    ("amt", r#""BOI=""#),
    ("occurred", r#""2026-12-03T10:01:48.123456Z""#),
    ("meta", r#""{\"k\": 1}""#),
    ("flag", "null"),
];

/// Rows in the table before either connector starts (`{order}` and
/// `{customer}` stand for the two aggregate types).
const SNAPSHOT: &str = "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
    SELECT gen_random_uuid(), '{order}', 'snap-' || g, 'OrderCreated', jsonb_build_object('n', g)
    FROM generate_series(1, 4) g";
const SNAPSHOT_RECORDS: usize = 4;

/// The transactions after both snapshots.
const STREAMED: &[&str] = &[
    // 40 aggregates, two events each, over two topics.
    "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
     SELECT gen_random_uuid(), CASE WHEN g % 2 = 0 THEN '{order}' ELSE '{customer}' END,
            'agg-' || g, 'Created', jsonb_build_object('seq', 1, 'agg', g)
     FROM generate_series(1, 40) g",
    "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
     SELECT gen_random_uuid(), CASE WHEN g % 2 = 0 THEN '{order}' ELSE '{customer}' END,
            'agg-' || g, 'Changed', jsonb_build_object('seq', 2, 'agg', g, 'f', g * 1.5)
     FROM generate_series(1, 20) g",
    "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
     SELECT gen_random_uuid(), CASE WHEN g % 2 = 0 THEN '{order}' ELSE '{customer}' END,
            'agg-' || g, 'Changed', jsonb_build_object('seq', 2, 'agg', g, 'f', g * 1.5)
     FROM generate_series(21, 40) g",
    r#"INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES
     (gen_random_uuid(), '{order}', 'Zoë-😀-日本', E'Unicode-😀-\x01',
      '{"name": "Zoë 😀 日本", "esc": "\u00e9\n\t\"q\" \\ /"}'),
     (gen_random_uuid(), '{order}', 'say "hi" \ back', 'Quoted', '{"q": "say \"hi\" \\ back"}'),
     (gen_random_uuid(), '{order}', E'ctl\t\r\x01end', 'Scalar', '"just a string"'),
     (gen_random_uuid(), '{customer}', 'agg-1', 'Deleted', NULL),
     (gen_random_uuid(), '{customer}', 'big', 'Large',
      (SELECT jsonb_build_object('blob', string_agg(md5(g::text), ''))
       FROM generate_series(1, 6000) g)),
     (gen_random_uuid(), '{order}', 'agg-2', 'Array', '[1, 2.5, "x", null, {"k": []}]'),
     (gen_random_uuid(), '{order}', 'agg-4', 'Number', '42'),
     (gen_random_uuid(), '{order}', 'agg-6', 'Shapes',
      '{"a": null, "b": [], "c": [{"x": 1}, {"x": 2}], "d": true, "e": {}, "f": 1.0,
        "g": {"h": null, "i": [], "j": "k"}}'),
     (gen_random_uuid(), '{customer}', '', 'EmptyKey', '{}'),
     (gen_random_uuid(), '{order}', 'agg-10', 'Numbers',
      '{"int": -7, "long": 2147483648, "neg_long": -9223372036854775808, "one": 1.0,
        "tenth": 0.1, "scale": 2.50, "small": 0.00001, "neg": -2.5, "e7": 12345678.9,
        "e20": 100000000000000000000.5, "zero": 0, "list": [0.5, 1.25, -3.0]}'),
     (gen_random_uuid(), '{customer}', 'agg-11', 'Nested',
      '{"items": [{"x": 1, "y": "a"}, {"x": 2}, {"x": 3, "y": null}], "one": [{"x": 1}, null],
        "n": {"o": {}, "p": [[1, 2], [3]], "q": [{"r": {"s": true}}, {}], "m": [[{"t": 1}]]},
        "t": "\u0001 \ud83d\ude00 \"z\""}')"#,
    // The outbox pattern's clean-up: published by both all the same.
    "BEGIN;
     INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES
       ('00000000-0000-0000-0000-0000000000aa', '{order}', 'agg-8', 'CleanedUp', '{\"gone\": true}');
     DELETE FROM outbox WHERE id = '00000000-0000-0000-0000-0000000000aa';
     COMMIT",
    // Neither publishes anything for these.
    "UPDATE outbox SET type = 'Updated' WHERE aggregateid = 'snap-1'",
    "DELETE FROM outbox WHERE aggregateid = 'snap-2'",
    "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES
     (gen_random_uuid(), '{order}', 'agg-2', 'Last', '{\"last\": true}')",
];
const STREAMED_RECORDS: usize = 40 + 40 + 11 + 1 + 1;

/// How Kafka Connect writes the EventRouter's records.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Converters {
    /// `StringConverter` for key and value.
    String,
    /// `JsonConverter` with `schemas.enable=false` for key and value.
    Json,
    /// The same with the EventRouter's `table.expand.json.payload=true`.
    JsonExpanded,
    /// `JsonConverter` with its default `schemas.enable=true`, as Kafka's
    /// `config/connect-standalone.properties` sets it for the worker.
    JsonSchemas,
    /// The same with `table.expand.json.payload=true`: an expanded
    /// payload's inferred schema in the envelope.
    JsonSchemasExpanded,
    /// Envelope placement (`table.fields.additional.placement=…:envelope`,
    /// [`ENVELOPE_PLACEMENT`]): `StringConverter` keys, `JsonConverter`
    /// values (`schemas.enable=false`), `table.expand.json.payload` as
    /// `expand` says. Compared with a walrelay of its own
    /// ([`walrelay_envelope`], [`compare_envelope`]).
    Envelope { expand: bool },
}

/// What a Debezium value must be.
#[derive(Debug, PartialEq)]
enum ExpectedValue {
    Bytes(Option<Vec<u8>>),
    /// Compared parsed (the expanded payload's bytes are Jackson's).
    Json(Value),
    /// The schema envelope's `payload`, compared parsed.
    JsonPayload(Value),
}

impl Converters {
    /// Debezium's key and value under these converters for walrelay's
    /// record (key = the aggregate id's text, value = the payload's, None
    /// for a NULL payload).
    fn expected(self, key: &[u8], value: Option<&[u8]>) -> (Vec<u8>, ExpectedValue) {
        let text = |b: &[u8]| String::from_utf8(b.to_vec()).expect("UTF-8");
        let json_string = |v: Option<&[u8]>| {
            ExpectedValue::Bytes(Some(
                v.map_or("null".to_owned(), |v| jackson_string(&text(v)))
                    .into_bytes(),
            ))
        };
        let quoted = jackson_string(&text(key)).into_bytes();
        match self {
            Converters::String => (key.to_vec(), ExpectedValue::Bytes(value.map(<[u8]>::to_vec))),
            Converters::Json => (quoted, json_string(value)),
            Converters::JsonExpanded => {
                let object = value.and_then(|v| match serde_json::from_slice(v) {
                    Ok(Value::Object(m)) => Some(Value::Object(m)),
                    _ => None,
                });
                match object {
                    Some(mut o) => {
                        drop_null_and_empty_arrays(&mut o);
                        (quoted, ExpectedValue::Json(o))
                    }
                    None => (quoted, json_string(value)),
                }
            }
            Converters::Envelope { .. } => {
                unreachable!("envelope setups are compared by compare_envelope")
            }
            Converters::JsonSchemasExpanded => {
                let (key, unexpanded) = Converters::JsonSchemas.expected(key, value);
                match Converters::JsonExpanded.expected(&[], value).1 {
                    ExpectedValue::Json(o) => (key, ExpectedValue::JsonPayload(o)),
                    _ => (key, unexpanded),
                }
            }
            Converters::JsonSchemas => (
                format!(
                    r#"{{"schema":{{"type":"string","optional":false}},"payload":{}}}"#,
                    jackson_string(&text(key))
                )
                .into_bytes(),
                ExpectedValue::Bytes(Some(
                    format!(
                        r#"{{"schema":{{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1}},"payload":{}}}"#,
                        value.map_or("null".to_owned(), |v| jackson_string(&text(v)))
                    )
                    .into_bytes(),
                )),
            ),
        }
    }

    /// The aggregate id in a Debezium key.
    fn aggregate(self, key: &[u8]) -> String {
        let json = || -> Value {
            serde_json::from_slice(key).unwrap_or_else(|e| {
                panic!(
                    "{self:?}: key is not JSON ({e}): {}",
                    String::from_utf8_lossy(key)
                )
            })
        };
        let id = match self {
            Converters::String | Converters::Envelope { .. } => {
                Some(String::from_utf8_lossy(key).into_owned())
            }
            Converters::Json | Converters::JsonExpanded => json().as_str().map(str::to_owned),
            Converters::JsonSchemas | Converters::JsonSchemasExpanded => {
                json()["payload"].as_str().map(str::to_owned)
            }
        };
        id.unwrap_or_else(|| panic!("{self:?}: no aggregate id in key {key:?}"))
    }
}

/// `table.expand.json.payload` builds a Connect schema from the payload's
/// JSON: members whose value is `null` or `[]` (no type to infer) are not
/// in it, at any depth.
fn drop_null_and_empty_arrays(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, v| !(v.is_null() || v.as_array().is_some_and(Vec::is_empty)));
            m.values_mut().for_each(drop_null_and_empty_arrays);
        }
        Value::Array(a) => a.iter_mut().for_each(drop_null_and_empty_arrays),
        _ => {}
    }
}

/// One Debezium connector: its name (also in its topics' prefix), how its
/// worker writes records, and its properties beyond the shared ones.
struct Setup {
    name: &'static str,
    converters: Converters,
    properties: &'static str,
}

/// One Connect worker runs them all (one JVM start for all seven). The
/// worker's own converters are `connect-standalone.properties`'s: the
/// `JsonConverter` with schemas; the others override them per connector.
const SETUPS: &[Setup] = &[
    Setup {
        name: "string",
        converters: Converters::String,
        properties: "key.converter=org.apache.kafka.connect.storage.StringConverter
value.converter=org.apache.kafka.connect.storage.StringConverter
",
    },
    Setup {
        name: "json",
        converters: Converters::Json,
        properties: "key.converter=org.apache.kafka.connect.json.JsonConverter
key.converter.schemas.enable=false
value.converter=org.apache.kafka.connect.json.JsonConverter
value.converter.schemas.enable=false
",
    },
    Setup {
        name: "expand",
        converters: Converters::JsonExpanded,
        properties: "key.converter=org.apache.kafka.connect.json.JsonConverter
key.converter.schemas.enable=false
value.converter=org.apache.kafka.connect.json.JsonConverter
value.converter.schemas.enable=false
transforms.outbox.table.expand.json.payload=true
transforms.outbox.table.fields.additional.placement=type:header:type
",
    },
    Setup {
        name: "schemas",
        converters: Converters::JsonSchemas,
        properties: "",
    },
    Setup {
        name: "expschemas",
        converters: Converters::JsonSchemasExpanded,
        properties: "transforms.outbox.table.expand.json.payload=true
",
    },
    Setup {
        name: "envelope",
        converters: Converters::Envelope { expand: true },
        properties: "key.converter=org.apache.kafka.connect.storage.StringConverter
value.converter=org.apache.kafka.connect.json.JsonConverter
value.converter.schemas.enable=false
transforms.outbox.table.expand.json.payload=true
transforms.outbox.table.fields.additional.placement=type:envelope:eventType,aggregatetype:envelope,attempt:envelope,amount:envelope:amt,occurred:envelope,meta:envelope,flag:envelope,type:header:eventType
",
    },
    Setup {
        name: "envstr",
        converters: Converters::Envelope { expand: false },
        properties: "key.converter=org.apache.kafka.connect.storage.StringConverter
value.converter=org.apache.kafka.connect.json.JsonConverter
value.converter.schemas.enable=false
transforms.outbox.table.fields.additional.placement=type:envelope:eventType,aggregatetype:envelope,attempt:envelope,amount:envelope:amt,occurred:envelope,meta:envelope,flag:envelope,type:header:eventType
",
    },
];

/// The envelope setups' placement, as [`Setup::properties`] spells it in
/// Debezium's terms (`type:envelope:eventType,aggregatetype:envelope,…,
/// amount:envelope:amt,…,type:header:eventType`).
const ENVELOPE_PLACEMENT: &str = "header_columns = [\"type:eventType\"]
envelope_columns = [\"type:eventType\", \"aggregatetype\", \"attempt\", \"amount:amt\", \"occurred\", \"meta\", \"flag\"]
";

/// The `[[outbox]]` keys of the walrelay compared with an envelope setup.
fn walrelay_envelope(expand: bool) -> String {
    format!("{ENVELOPE_PLACEMENT}expand_json_payload = {expand}\n")
}

/// The `[[outbox]]` keys of the walrelay compared byte for byte with a
/// JSON converter setup (`None`: no such walrelay, the setup is compared
/// with the default walrelay's records only).
fn walrelay_forms(converters: Converters) -> Option<&'static str> {
    match converters {
        Converters::Json => Some("converter = \"json\"\n"),
        Converters::JsonExpanded => Some(
            "key_converter = \"json\"\nvalue_converter = \"json\"\nexpand_json_payload = true\n",
        ),
        Converters::JsonSchemas => Some("converter = \"json_with_schema\"\n"),
        Converters::JsonSchemasExpanded => {
            Some("converter = \"json_with_schema\"\nexpand_json_payload = true\n")
        }
        Converters::String | Converters::Envelope { .. } => None,
    }
}

/// Compares the records of the walrelay configured with a setup's forms
/// ([`walrelay_forms`]: `wf`) with Debezium's (`d`), bytes for bytes:
/// key, value, partition, the `id` header (and `type` where Debezium
/// places it), each aggregate's records in the same order. Returns the
/// differences and how many records were compared.
fn compare_bytes(setup: &Setup, wf: &ByAggregate, d: &ByAggregate) -> (Vec<String>, usize) {
    let name = setup.name;
    let mut out = Vec::new();
    let mut compared = 0;
    let aggregates: std::collections::BTreeSet<&(String, String)> =
        wf.keys().chain(d.keys()).collect();
    let show = |b: Option<&[u8]>| match b {
        Some(b) if b.len() > 400 => format!("<{} bytes>", b.len()),
        b => format!("{:?}", b.map(String::from_utf8_lossy)),
    };
    for agg in aggregates {
        let (ws, ds) = (
            wf.get(agg).map_or(&[][..], Vec::as_slice),
            d.get(agg).map_or(&[][..], Vec::as_slice),
        );
        if ws.len() != ds.len() {
            out.push(format!(
                "{agg:?}: walrelay ({name} forms) wrote {} records, Debezium ({name}) {}",
                ws.len(),
                ds.len()
            ));
            continue;
        }
        for (i, (a, b)) in ws.iter().zip(ds).enumerate() {
            compared += 1;
            let at = format!("{agg:?} record {i} ({name}, bytes)");
            if a.key != b.key {
                out.push(format!(
                    "{at}: key {} and Debezium's {}",
                    show(a.key.as_deref()),
                    show(b.key.as_deref())
                ));
            }
            if a.value != b.value {
                out.push(format!(
                    "{at}: value {} and Debezium's {}",
                    show(a.value.as_deref()),
                    show(b.value.as_deref())
                ));
            }
            if a.partition != b.partition {
                out.push(format!(
                    "{at}: partition {} and Debezium's {}",
                    a.partition, b.partition
                ));
            }
            let placed = setup.converters == Converters::JsonExpanded;
            for header in ["id"].into_iter().chain(placed.then_some("type")) {
                if a.header(header).is_none() || a.header(header) != b.header(header) {
                    out.push(format!(
                        "{at}: {header} header: walrelay {:?}, Debezium {:?}",
                        a.header_str(header),
                        b.header_str(header)
                    ));
                }
            }
        }
    }
    (out, compared)
}

/// The headers of each record of a walrelay with [`ENVELOPE_PLACEMENT`].
const WALRELAY_ENVELOPE_HEADERS: &[&str] = &["id", "eventType", "walrelay.lsn"];

/// Compares an envelope setup's records (`d`) with those of the walrelay
/// configured alike (`we`), using the default walrelay's records (`w`: the
/// payload as the row has it, the `type` header) for what each must be.
///
/// walrelay's envelope must be `{"payload": P, "eventType": type,
/// "aggregatetype": the aggregate type, …}` ([`ENVELOPE_MEMBERS`] after
/// them) with P the payload's text as a string, or (expand) an object
/// payload as Debezium's `table.expand.json.payload` writes it — parsed
/// equal to the row's JSON once `null` and `[]` members are left out — and
/// any other payload as its text. Debezium's: the same bytes. Keys,
/// partitions, the `id` and `eventType` headers: equal.
fn compare_envelope(
    setup: &Setup,
    w: &ByAggregate,
    we: &ByAggregate,
    d: &ByAggregate,
) -> Vec<String> {
    let Converters::Envelope { expand } = setup.converters else {
        unreachable!()
    };
    let name = setup.name;
    let mut out = Vec::new();
    let aggregates: std::collections::BTreeSet<&(String, String)> =
        w.keys().chain(we.keys()).chain(d.keys()).collect();
    let parse = |who: &str, v: Option<&[u8]>| -> Value {
        match v {
            None => Value::Null,
            Some(v) => serde_json::from_slice(v).unwrap_or_else(|e| {
                panic!("{who}: not JSON ({e}): {}", String::from_utf8_lossy(v))
            }),
        }
    };
    for agg in aggregates {
        fn get<'a>(m: &'a ByAggregate, agg: &(String, String)) -> &'a [Consumed] {
            m.get(agg).map_or(&[][..], Vec::as_slice)
        }
        let (ws, wes, ds) = (get(w, agg), get(we, agg), get(d, agg));
        if ws.len() != wes.len() || wes.len() != ds.len() {
            out.push(format!(
                "{agg:?}: walrelay wrote {} records, walrelay with an envelope ({name}) {}, \
                 Debezium ({name}) {}",
                ws.len(),
                wes.len(),
                ds.len()
            ));
            continue;
        }
        let aggregate_type = agg.0.strip_prefix("outbox.event.").unwrap_or(&agg.0);
        for (i, ((raw, a), b)) in ws.iter().zip(wes).zip(ds).enumerate() {
            let at = format!("{agg:?} record {i} ({name})");
            if a.key != b.key || a.key != raw.key {
                out.push(format!(
                    "{at}: keys {:?} and {:?}",
                    a.key.as_deref().map(String::from_utf8_lossy),
                    b.key.as_deref().map(String::from_utf8_lossy)
                ));
            }
            let key = a.key.as_deref().unwrap_or_default();
            if a.partition != partition_of(key) || b.partition != partition_of(key) {
                out.push(format!(
                    "{at}: partitions {} and {}, murmur2 gives {}",
                    a.partition,
                    b.partition,
                    partition_of(key)
                ));
            }
            let payload_text = raw
                .value
                .as_deref()
                .map(|v| String::from_utf8(v.to_vec()).expect("UTF-8 payload"));
            let raw_payload = match &payload_text {
                None => Value::Null,
                Some(t) if expand => serde_json::from_str(t).expect("a jsonb payload"),
                Some(t) => Value::String(t.clone()),
            };
            // Expanded, the payload is Debezium's form of it, checked below.
            let payload = match (expand, &raw_payload) {
                (true, Value::Object(_)) => Value::Null,
                (true, Value::Null) | (false, _) => raw_payload.clone(),
                (true, _) => Value::String(payload_text.clone().unwrap_or_default()),
            };
            let mut want = serde_json::Map::new();
            want.insert("payload".into(), payload);
            want.insert(
                "eventType".into(),
                Value::String(raw.header_str("type").unwrap_or_default()),
            );
            want.insert("aggregatetype".into(), Value::String(aggregate_type.into()));
            for (name, value) in ENVELOPE_MEMBERS {
                want.insert((*name).into(), serde_json::from_str(value).unwrap());
            }
            let want = Value::Object(want);
            let (mut got_w, got_d) = (
                parse("walrelay", a.value.as_deref()),
                parse("Debezium", b.value.as_deref()),
            );
            if expand && raw_payload.is_object() {
                // Debezium's expanded object: the row's JSON with `null`
                // and `[]` members left out, a merged array element's
                // missing members `null` (left out here on both sides).
                let mut p = got_d["payload"].clone();
                drop_null_and_empty_arrays(&mut p);
                let mut want_p = raw_payload.clone();
                drop_null_and_empty_arrays(&mut want_p);
                if p != want_p {
                    out.push(format!("{at}: Debezium's payload {p}, expected {want_p}"));
                }
                got_w["payload"] = Value::Null;
            }
            if got_w != want {
                out.push(format!(
                    "{at}: walrelay's envelope {got_w}, expected {want}"
                ));
            }
            // And Debezium's bytes are walrelay's.
            if a.value != b.value {
                let cut = |v: Option<&[u8]>| {
                    let s = String::from_utf8_lossy(v.unwrap_or_default());
                    if s.len() > 400 {
                        format!("<{} bytes>", s.len())
                    } else {
                        s.into_owned()
                    }
                };
                out.push(format!(
                    "{at}: Debezium's envelope {}, walrelay's {}",
                    cut(b.value.as_deref()),
                    cut(a.value.as_deref())
                ));
            }
            // Member order: payload first, then the placement's order
            // (found from the end: the payload holds none of these names).
            for (who, v) in [("walrelay", &a.value), ("Debezium", &b.value)] {
                let v = String::from_utf8_lossy(v.as_deref().unwrap_or_default());
                let at_of = |name: &str| v.rfind(&format!("\"{name}\":"));
                let order: Vec<Option<usize>> = ["eventType", "aggregatetype"]
                    .into_iter()
                    .chain(ENVELOPE_MEMBERS.iter().map(|(n, _)| *n))
                    .map(at_of)
                    .collect();
                let ordered = order.iter().all(Option::is_some) && order.is_sorted();
                if !v.starts_with("{\"payload\":") || !ordered {
                    out.push(format!("{at}: {who}'s members are not in order: {v:.200}"));
                }
            }
            for header in ["id", "eventType"] {
                if a.header(header).is_none() || a.header(header) != b.header(header) {
                    out.push(format!(
                        "{at}: {header} header: walrelay {:?}, Debezium {:?}",
                        a.header_str(header),
                        b.header_str(header)
                    ));
                }
            }
            if header_names(b) != sorted(DEBEZIUM_HEADERS, Some("eventType")) {
                out.push(format!("{at}: Debezium's headers {:?}", header_names(b)));
            }
            let snapshot = a.header("walrelay.snapshot").map(|_| "walrelay.snapshot");
            if header_names(a) != sorted(WALRELAY_ENVELOPE_HEADERS, snapshot) {
                out.push(format!("{at}: walrelay's headers {:?}", header_names(a)));
            }
        }
    }
    out
}

/// The headers of each walrelay record (and `walrelay.snapshot` on
/// snapshot rows): `type` is `header_columns`' default.
const WALRELAY_HEADERS: &[&str] = &["id", "type", "walrelay.lsn"];
/// The headers of each Debezium 3.6.1 record (and `type` with the expand
/// setup's `table.fields.additional.placement=type:header:type`).
const DEBEZIUM_HEADERS: &[&str] = &[
    "__debezium.context.connectorLogicalName",
    "__debezium.context.taskId",
    "__debezium.context.connectorName",
    "__debezium.context.runId",
    "id",
];

/// A side's records: (topic without the side's prefix, aggregate id) →
/// the aggregate's records in offset order.
type ByAggregate = BTreeMap<(String, String), Vec<Consumed>>;

fn by_aggregate(
    recs: Vec<Consumed>,
    prefix: &str,
    aggregate: impl Fn(&[u8]) -> String,
) -> ByAggregate {
    let mut m = ByAggregate::new();
    for r in recs {
        let topic = r
            .topic
            .strip_prefix(prefix)
            .unwrap_or_else(|| panic!("{} does not start with {prefix}", r.topic))
            .to_owned();
        let key = r
            .key
            .as_deref()
            .unwrap_or_else(|| panic!("a record without a key: {r:?}"));
        m.entry((topic, aggregate(key))).or_default().push(r);
    }
    for recs in m.values_mut() {
        recs.sort_by_key(|r| (r.partition, r.offset));
    }
    m
}

fn header_names(r: &Consumed) -> Vec<&str> {
    let mut names: Vec<&str> = r.headers.iter().map(|(k, _)| k.as_str()).collect();
    names.sort_unstable();
    names
}

fn sorted<'a>(names: &[&'a str], extra: Option<&'a str>) -> Vec<&'a str> {
    let mut v: Vec<&str> = names.iter().copied().chain(extra).collect();
    v.sort_unstable();
    v
}

/// Compares one Debezium setup's records with walrelay's; returns every
/// difference, and how many aggregates are on another partition than
/// walrelay's.
fn compare_setup(setup: &Setup, w: &ByAggregate, d: &ByAggregate) -> (Vec<String>, usize) {
    let mut out = Vec::new();
    let mut moved = std::collections::BTreeSet::new();
    let name = setup.name;
    let aggregates: std::collections::BTreeSet<&(String, String)> =
        w.keys().chain(d.keys()).collect();
    for agg in aggregates {
        let (ws, ds) = (
            w.get(agg).map_or(&[][..], Vec::as_slice),
            d.get(agg).map_or(&[][..], Vec::as_slice),
        );
        if ws.len() != ds.len() {
            out.push(format!(
                "{agg:?}: walrelay wrote {} records, Debezium ({name}) {}",
                ws.len(),
                ds.len()
            ));
            continue;
        }
        for (i, (a, b)) in ws.iter().zip(ds).enumerate() {
            let at = format!("{agg:?} record {i} ({name})");
            let key = a.key.as_deref().unwrap_or_default();
            let (want_key, want_value) = setup.converters.expected(key, a.value.as_deref());
            if b.key.as_deref() != Some(&want_key[..]) {
                out.push(format!(
                    "{at}: key {:?}, expected {:?}",
                    b.key.as_deref().map(String::from_utf8_lossy),
                    String::from_utf8_lossy(&want_key)
                ));
            }
            let got_value = match &want_value {
                ExpectedValue::Bytes(_) => ExpectedValue::Bytes(b.value.clone()),
                // Array elements of a merged schema carry `null` for the
                // members they lack: dropped on both sides here (the bytes
                // are compared with walrelay's in [`compare_bytes`]).
                ExpectedValue::Json(_) | ExpectedValue::JsonPayload(_) => {
                    let mut v = b
                        .value
                        .as_deref()
                        .and_then(|v| serde_json::from_slice(v).ok())
                        .unwrap_or(Value::Null);
                    if let ExpectedValue::JsonPayload(_) = want_value {
                        v = v["payload"].take();
                    }
                    drop_null_and_empty_arrays(&mut v);
                    match want_value {
                        ExpectedValue::JsonPayload(_) => ExpectedValue::JsonPayload(v),
                        _ => ExpectedValue::Json(v),
                    }
                }
            };
            if got_value != want_value {
                let show = |v: &ExpectedValue| match v {
                    ExpectedValue::Bytes(Some(b)) if b.len() > 400 => {
                        format!("<{} bytes>", b.len())
                    }
                    ExpectedValue::Bytes(b) => {
                        format!("{:?}", b.as_deref().map(String::from_utf8_lossy))
                    }
                    ExpectedValue::Json(j) | ExpectedValue::JsonPayload(j) => j.to_string(),
                };
                out.push(format!(
                    "{at}: value {}, expected {}",
                    show(&got_value),
                    show(&want_value)
                ));
            }
            if a.partition != partition_of(key) {
                out.push(format!(
                    "{at}: walrelay's partition {}, murmur2 gives {}",
                    a.partition,
                    partition_of(key)
                ));
            }
            if b.partition != partition_of(&want_key) {
                out.push(format!(
                    "{at}: Debezium's partition {}, murmur2 gives {}",
                    b.partition,
                    partition_of(&want_key)
                ));
            }
            if a.partition != b.partition {
                moved.insert(agg);
            }
            if a.header("id").is_none() || a.header("id") != b.header("id") {
                out.push(format!(
                    "{at}: id header: walrelay {:?}, Debezium {:?}",
                    a.header_str("id"),
                    b.header_str("id")
                ));
            }
            let placed = (setup.converters == Converters::JsonExpanded).then_some("type");
            if placed.is_some() && a.header("type") != b.header("type") {
                out.push(format!(
                    "{at}: type header: walrelay {:?}, Debezium {:?}",
                    a.header_str("type"),
                    b.header_str("type")
                ));
            }
            if header_names(b) != sorted(DEBEZIUM_HEADERS, placed) {
                out.push(format!("{at}: Debezium's headers {:?}", header_names(b)));
            }
        }
    }
    (out, moved.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walrelay_and_debezium_write_the_same_outbox_records() {
    let _one = ONE_AT_A_TIME.lock().await;
    require_kafka();
    let started = Instant::now();
    let (libs, debezium_version) = connect_libs();
    let db = TestDb::new("wr_dbz_outbox").await;
    let names = Names::new("wr_do");
    let tag = &names.connector;
    // The aggregate types name the topics: unique to this run, so that
    // Debezium's default route can be used as it is.
    let (order, customer) = (format!("Order_{tag}"), format!("Customer_{tag}"));
    let fill = |sql: &str| {
        sql.replace("{order}", &order)
            .replace("{customer}", &customer)
    };
    db.client.batch_execute(OUTBOX).await.expect("outbox table");
    db.client
        .batch_execute(&fill(SNAPSHOT))
        .await
        .expect("snapshot rows");
    db.client
        .batch_execute(&format!(
            "CREATE PUBLICATION {pub} FOR TABLE outbox;
             ALTER PUBLICATION {pub} OWNER TO walrelay;",
            pub = names.publication
        ))
        .await
        .expect("publication");

    // Topic prefixes: none for the StringConverter setup (EventRouter's
    // default route), one per other setup and for walrelay.
    let w_prefix = format!("{tag}_w.");
    let prefix = |setup: &str| match setup {
        "string" => String::new(),
        s => format!("{tag}_{s}."),
    };
    let topics_of = |prefix: &str| -> Vec<String> {
        [&order, &customer]
            .iter()
            .map(|t| format!("{prefix}outbox.event.{t}"))
            .collect()
    };
    // A walrelay of its own for each envelope setup.
    let w_envelope = |setup: &str| format!("{tag}_w{setup}.");
    let envelope_setups: Vec<&Setup> = SETUPS
        .iter()
        .filter(|s| matches!(s.converters, Converters::Envelope { .. }))
        .collect();
    // And one for each JSON converter setup, with the matching forms.
    let form_setups: Vec<(&Setup, &str)> = SETUPS
        .iter()
        .filter_map(|s| walrelay_forms(s.converters).map(|f| (s, f)))
        .collect();
    let prefixes: Vec<String> = std::iter::once(w_prefix.clone())
        .chain(SETUPS.iter().map(|s| prefix(s.name)))
        .chain(envelope_setups.iter().map(|s| w_envelope(s.name)))
        .chain(form_setups.iter().map(|(s, _)| w_envelope(s.name)))
        .collect();
    let all_topics: Vec<String> = prefixes.iter().flat_map(|p| topics_of(p)).collect();
    create_topics(&all_topics, PARTITIONS).await;

    let slot = |setup: &str| format!("{}_{setup}", names.slot);
    // The EventRouter with its defaults; besides the converters, only the
    // route's prefix (not for "string") and what names things are set.
    let connectors: Vec<String> = SETUPS
        .iter()
        .map(|s| {
            let route = match prefix(s.name) {
                p if p.is_empty() => String::new(),
                p => format!(
                    "transforms.outbox.route.topic.replacement={p}outbox.event.${{routedByValue}}\n"
                ),
            };
            let name = format!("{tag}_{}", s.name);
            Debezium {
                name: &name,
                topic_prefix: &name,
                slot: &slot(s.name),
                snapshot_mode: "initial",
                tables: "public\\\\.outbox",
                more: &format!(
                    "transforms=outbox
transforms.outbox.type=io.debezium.transforms.outbox.EventRouter
{route}{properties}",
                    properties = s.properties
                ),
            }
            .properties(&db, &names.publication)
        })
        .collect();
    // Kafka Connect 4.1 has no default converter: these two lines are those
    // of Kafka's config/connect-standalone.properties.
    let mut connect = Connect::start(
        "walrelay_dbz_outbox",
        &libs,
        "key.converter=org.apache.kafka.connect.json.JsonConverter
value.converter=org.apache.kafka.connect.json.JsonConverter
",
        &connectors,
    );

    // walrelay's defaults, its topic template prefixed.
    let config = connector_config(
        &db,
        &names,
        &format!(
            "[[outbox]]\ntable = \"public.outbox\"\ntopic = \"{w_prefix}{}\"\n",
            walrelay::config::TopicTemplate::DEFAULT
        ),
    );
    let mut relay = RelayProcess::start(&config, &[]);
    let mut envelope_relays = Vec::new();
    for setup in &envelope_setups {
        let Converters::Envelope { expand } = setup.converters else {
            unreachable!()
        };
        let own = Names {
            publication: names.publication.clone(),
            ..Names::new(&format!("wr_do{}", setup.name))
        };
        let config = connector_config(
            &db,
            &own,
            &format!(
                "[[outbox]]\ntable = \"public.outbox\"\ntopic = \"{}{}\"\n{}",
                w_envelope(setup.name),
                walrelay::config::TopicTemplate::DEFAULT,
                walrelay_envelope(expand)
            ),
        );
        envelope_relays.push(RelayProcess::start(&config, &[]));
    }
    for (setup, forms) in &form_setups {
        let own = Names {
            publication: names.publication.clone(),
            ..Names::new(&format!("wr_do{}", setup.name))
        };
        let config = connector_config(
            &db,
            &own,
            &format!(
                "[[outbox]]\ntable = \"public.outbox\"\ntopic = \"{}{}\"\n{forms}",
                w_envelope(setup.name),
                walrelay::config::TopicTemplate::DEFAULT,
            ),
        );
        envelope_relays.push(RelayProcess::start(&config, &[]));
    }
    relay.wait_log("snapshot completed", CATCH_UP).await;
    for r in &mut envelope_relays {
        r.wait_log("snapshot completed", CATCH_UP).await;
    }

    let count = |prefix: &str| {
        let topics = topics_of(prefix);
        let refs: Vec<&str> = topics.iter().map(String::as_str).collect();
        consume_to_end(&refs).len()
    };
    // Every Debezium slot exists (so every later change is in it) and every
    // snapshot is in Kafka.
    wait_for("Debezium's snapshots", DEBEZIUM_READY, || {
        connect.assert_alive();
        let snapshotted = SETUPS
            .iter()
            .all(|s| count(&prefix(s.name)) >= SNAPSHOT_RECORDS);
        let db = &db;
        async move {
            for s in SETUPS {
                db.confirmed_flush(&slot(s.name)).await?;
            }
            snapshotted.then_some(())
        }
    })
    .await;
    eprintln!("snapshots done after {:?}", started.elapsed());

    for tx in STREAMED {
        db.client.batch_execute(&fill(tx)).await.expect(tx);
    }
    let total = SNAPSHOT_RECORDS + STREAMED_RECORDS;
    for p in &prefixes {
        wait_for(
            &format!("{total} records in {p}outbox.event.*"),
            CATCH_UP,
            || {
                connect.assert_alive();
                let n = count(p);
                async move { (n >= total).then_some(()) }
            },
        )
        .await;
    }
    eprintln!("caught up after {:?}", started.elapsed());

    let read = |prefix: &str| {
        let topics = topics_of(prefix);
        let refs: Vec<&str> = topics.iter().map(String::as_str).collect();
        consume_to_end(&refs)
    };
    let mut differences = Vec::new();
    let walrelay_records = read(&w_prefix);
    if walrelay_records.len() != total {
        differences.push(format!(
            "walrelay wrote {} records, not {total}",
            walrelay_records.len()
        ));
    }
    for r in &walrelay_records {
        let snapshot = r.header("walrelay.snapshot").map(|_| "walrelay.snapshot");
        if header_names(r) != sorted(WALRELAY_HEADERS, snapshot) {
            differences.push(format!("walrelay's headers {:?}: {r:?}", header_names(r)));
        }
    }
    let w = by_aggregate(walrelay_records, &w_prefix, |k| {
        String::from_utf8_lossy(k).into_owned()
    });
    for setup in SETUPS {
        let d = by_aggregate(read(&prefix(setup.name)), &prefix(setup.name), |k| {
            setup.converters.aggregate(k)
        });
        if let Converters::Envelope { .. } = setup.converters {
            let we_prefix = w_envelope(setup.name);
            let we = by_aggregate(read(&we_prefix), &we_prefix, |k| {
                String::from_utf8_lossy(k).into_owned()
            });
            let diffs = compare_envelope(setup, &w, &we, &d);
            eprintln!("{}: {} differences", setup.name, diffs.len());
            differences.extend(diffs);
            continue;
        }
        let (diffs, moved) = compare_setup(setup, &w, &d);
        differences.extend(diffs);
        if walrelay_forms(setup.converters).is_some() {
            let wf_prefix = w_envelope(setup.name);
            let wf = by_aggregate(read(&wf_prefix), &wf_prefix, |k| {
                setup.converters.aggregate(k)
            });
            let (diffs, compared) = compare_bytes(setup, &wf, &d);
            eprintln!(
                "{}: walrelay with the matching forms, {compared} records compared bytes for \
                 bytes, {} differences",
                setup.name,
                diffs.len()
            );
            if compared != total {
                differences.push(format!(
                    "{}: {compared} records compared bytes for bytes, not {total}",
                    setup.name
                ));
            }
            differences.extend(diffs);
        }
        // The same key bytes, the same partitions; quoted keys, others.
        let expect_moved = setup.converters != Converters::String;
        if (moved > 0) != expect_moved {
            differences.push(format!(
                "{}: {moved} of {} aggregates on another partition than walrelay's",
                setup.name,
                w.len()
            ));
        }
        eprintln!(
            "{}: {moved} of {} aggregates on another partition",
            setup.name,
            w.len()
        );
    }
    assert!(
        differences.is_empty(),
        "walrelay and Debezium {debezium_version}'s EventRouter differ in {} places:\n{}",
        differences.len(),
        differences.join("\n")
    );
    assert_eq!(relay.stop().code(), Some(0), "{}", relay.log());
    for mut r in envelope_relays {
        assert_eq!(r.stop().code(), Some(0), "{}", r.log());
    }
    eprintln!("compared in {:?}", started.elapsed());
}
