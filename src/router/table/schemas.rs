//! `[[table]] format = "avro" | "json_schema" | "protobuf"`: the Kafka Connect schemas
//! Debezium's PostgreSQL connector gives a table's change events (key
//! `<prefix>.<schema>.<table>.Key`, value `<…>.Envelope` with `before` and
//! `after` of `<…>.Value`, `source` `io.debezium.connector.postgresql.Source`,
//! `op`, `ts_ms`, `transaction` `event.block`), and their Avro and JSON
//! Schema texts as Confluent's `AvroConverter` (`AvroData`) and
//! `JsonSchemaConverter` (`JsonSchemaData`) write them, or as proto3 files
//! ([`protobuf`], after Confluent's `ProtobufData`). The bodies are made
//! from the JSON path's own output ([`body`]): the values are the ones
//! `debezium.rs` writes, only their encoding changes.
//!
//! Invariants:
//! - **One type decision.** A column's Connect schema follows from the
//!   mapping [`debezium::Mapping`] chose for its JSON (plus its type oid and
//!   modifier for the names and parameters Debezium adds): the value and
//!   its schema cannot disagree on what the column is.
//! - **Required only where every event holds a value.** pgoutput does not
//!   send `NOT NULL`; the catalog (`pg_attribute.attnotnull`, read at
//!   start) does. A column is required when it is in the replica
//!   identity's key or the catalog's primary key (PostgreSQL keeps those
//!   `NOT NULL`), or, in Avro, when the catalog says `NOT NULL` (the
//!   column's `attnotnull`, or its type a domain declared `NOT NULL`, as
//!   the JDBC driver Debezium asks reads it) *and*
//!   every `before` and `after` the table's events can hold carries its
//!   value: REPLICA IDENTITY FULL (or NOTHING: no old rows), or deletes
//!   skipped. (Not in JSON Schema: a registry checking BACKWARD refuses a
//!   required property made `oneOf` null, so the widening below could not
//!   be registered.) Under DEFAULT / USING INDEX a delete's `before` holds
//!   only the identity's columns; Debezium writes the type's zero value
//!   (`0`, `""`) there, walrelay never invents one, so such a column stays
//!   optional (`["null", T]`, default null). docs/compatibility.md says so.
//! - **The stream wins over the catalog.** The catalog is read now, the
//!   stream may be behind it: a row holding NULL in a column the catalog
//!   calls `NOT NULL` (the constraint added since, or dropped while the
//!   row was written) makes that column optional for that relation until
//!   the next start — the next schema version, a BACKWARD-compatible
//!   widening in Avro — before its record is encoded: never a failed or
//!   dropped row (see `encode`).
//! - **Enums carry their labels.** An enum column is a string named
//!   `io.debezium.data.Enum` with parameter `allowed`, its type's labels
//!   (`pg_enum`, in `enumsortorder`) joined by commas, as Debezium writes
//!   it. A value outside them (`ALTER TYPE … ADD VALUE` or `RENAME VALUE`
//!   since the start) appends it to the list and writes its record under
//!   the next version, which says it (see `encode`). An enum array is an
//!   array of those `Enum`s (its element type's labels), required in Avro
//!   as Debezium's are; a NULL element makes them optional the way a NULL
//!   makes a `NOT NULL` column optional (the next version, before the
//!   record). Under JSON Schema and Protobuf the items stay optional: a
//!   required item made optional is no compatible change there. A domain
//!   over an enum is written as the enum (Debezium 3.6.1 does not start on
//!   a database holding one: docs/compatibility.md).
//! - **The same shape gives the same text**, byte for byte, at every start:
//!   a re-sent record finds the subject version it was first written with.
//! - Pure: no I/O, no clock.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::config::{BinaryHandlingMode, DecimalHandlingMode, TimePrecisionMode};
use crate::pgoutput::Oid;
use crate::router::debezium::{Kind, Mapping, Modes};
use crate::router::schema::SchemaKind;

pub(crate) mod body;
pub(crate) mod fixed;
pub(crate) mod protobuf;

/// A Kafka Connect type.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Type {
    Int16,
    Int32,
    Int64,
    Float32,
    Float64,
    Boolean,
    String,
    Bytes,
    Array(Box<Schema>),
    /// Fields: (name in the schema, key in the JSON path's object, schema).
    Struct(Vec<Field>),
}

/// One field of a struct.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Field {
    /// Its name in the Avro/JSON schema (Avro's rules: letters, digits, `_`).
    pub name: String,
    /// Its key in the JSON path's object.
    pub key: String,
    pub schema: Schema,
}

/// A Kafka Connect schema: type, optionality, name, version, parameters.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Schema {
    pub ty: Type,
    pub optional: bool,
    pub name: Option<String>,
    pub version: Option<u32>,
    pub doc: Option<&'static str>,
    pub params: Vec<(&'static str, String)>,
    /// A default value (only `source.snapshot`'s `"false"`).
    pub default: Option<&'static str>,
    /// `org.apache.kafka.connect.data.Decimal`: (precision, scale) for
    /// Avro's `decimal` logical type.
    pub decimal: Option<(u32, u32)>,
}

impl Schema {
    pub(crate) fn of(ty: Type) -> Schema {
        Schema {
            ty,
            optional: false,
            name: None,
            version: None,
            doc: None,
            params: Vec::new(),
            default: None,
            decimal: None,
        }
    }

    pub(crate) fn named(ty: Type, name: &str) -> Schema {
        Schema {
            name: Some(name.to_owned()),
            version: Some(1),
            ..Schema::of(ty)
        }
    }

    pub(crate) fn optional(self) -> Schema {
        Schema {
            optional: true,
            ..self
        }
    }

    pub(crate) fn field(name: &str, schema: Schema) -> Field {
        Field {
            name: avro_name(name),
            key: name.to_owned(),
            schema,
        }
    }

    /// Whether a value of it holds a `Decimal` (JSON Schema bodies write
    /// decimals as numbers, the JSON path as base64).
    pub(crate) fn has_decimal(&self) -> bool {
        self.decimal.is_some()
            || match &self.ty {
                Type::Array(item) => item.has_decimal(),
                Type::Struct(fields) => fields.iter().any(|f| f.schema.has_decimal()),
                _ => false,
            }
    }
}

const DECIMAL: &str = "org.apache.kafka.connect.data.Decimal";

/// Debezium's enum: a string with the labels in parameter `allowed`.
const ENUM: &str = "io.debezium.data.Enum";

fn decimal(precision: Option<u32>, scale: u32) -> Schema {
    let mut params = vec![("scale", scale.to_string())];
    if let Some(p) = precision {
        params.push(("connect.decimal.precision", p.to_string()));
    }
    Schema {
        params,
        // Confluent's AvroData: precision 64 when the schema names none.
        decimal: Some((precision.unwrap_or(64), scale)),
        ..Schema::named(Type::Bytes, DECIMAL)
    }
}

/// The Connect schema Debezium gives a value of a column of type `oid`
/// (user types resolved) with modifier `typmod`, written as `mapping`
/// under `modes` (required; the caller makes it optional); `labels`: an
/// enum's (or an enum array's element type's), for `io.debezium.data.Enum`;
/// `items_required`: an enum array's items are required, as Debezium's
/// (other arrays' items are optional).
pub(crate) fn column(
    oid: Oid,
    typmod: i32,
    mapping: Mapping,
    modes: Modes,
    labels: Option<&[String]>,
    items_required: bool,
) -> Schema {
    let scalar = match labels {
        Some(labels) => Schema {
            params: vec![("allowed", labels.join(","))],
            ..Schema::named(Type::String, ENUM)
        },
        None => scalar(oid, typmod, mapping.kind, modes),
    };
    match mapping.array {
        true if labels.is_some() && items_required => Schema::of(Type::Array(Box::new(scalar))),
        true => Schema::of(Type::Array(Box::new(scalar.optional()))),
        false => scalar,
    }
}

/// The element type of array type `oid`, or `oid` itself.
fn element(oid: Oid) -> Oid {
    match oid {
        2951 => 2950,
        199 => 114,
        3807 => 3802,
        1001 => 17,
        1000 => 16,
        1005 => 21,
        1007 => 23,
        1016 => 20,
        1231 => 1700,
        other => other,
    }
}

fn scalar(oid: Oid, typmod: i32, kind: Kind, modes: Modes) -> Schema {
    let connect = modes.time == TimePrecisionMode::Connect;
    match kind {
        Kind::Int => match element(oid) {
            21 => Schema::of(Type::Int16),
            23 => Schema::of(Type::Int32),
            _ => Schema::of(Type::Int64),
        },
        Kind::Bool | Kind::Bit => Schema::of(Type::Boolean),
        Kind::Float32 => Schema::of(Type::Float32),
        Kind::Float64 | Kind::DecimalDouble => Schema::of(Type::Float64),
        Kind::Decimal { scale: Some(scale) } => {
            let precision = ((typmod - 4) >> 16) & 0xffff;
            decimal(Some(precision as u32), u32::from(scale))
        }
        Kind::Decimal { scale: None } => Schema {
            doc: Some("Variable scaled decimal"),
            ..Schema::named(
                Type::Struct(vec![
                    Schema::field("scale", Schema::of(Type::Int32)),
                    Schema::field("value", Schema::of(Type::Bytes)),
                ]),
                "io.debezium.data.VariableScaleDecimal",
            )
        },
        Kind::DecimalString | Kind::BytesHex => Schema::of(Type::String),
        Kind::TimeTz => Schema::named(Type::String, "io.debezium.time.ZonedTime"),
        Kind::Text => match element(oid) {
            2950 => Schema::named(Type::String, "io.debezium.data.Uuid"),
            114 | 3802 => Schema::named(Type::String, "io.debezium.data.Json"),
            142 => Schema::named(Type::String, "io.debezium.data.Xml"),
            _ => Schema::of(Type::String),
        },
        Kind::BytesBase64 if modes.binary == BinaryHandlingMode::Bytes => Schema::of(Type::Bytes),
        Kind::BytesBase64 => Schema::of(Type::String),
        Kind::Date if connect => Schema::named(Type::Int32, "org.apache.kafka.connect.data.Date"),
        Kind::Date => Schema::named(Type::Int32, "io.debezium.time.Date"),
        Kind::TimeMillis if connect => {
            Schema::named(Type::Int32, "org.apache.kafka.connect.data.Time")
        }
        Kind::TimeMillis => Schema::named(Type::Int32, "io.debezium.time.Time"),
        Kind::TimeMicros => Schema::named(Type::Int64, "io.debezium.time.MicroTime"),
        Kind::TimestampMillis if connect => {
            Schema::named(Type::Int64, "org.apache.kafka.connect.data.Timestamp")
        }
        Kind::TimestampMillis => Schema::named(Type::Int64, "io.debezium.time.Timestamp"),
        Kind::TimestampMicros => Schema::named(Type::Int64, "io.debezium.time.MicroTimestamp"),
        Kind::TimestampTz { .. } => Schema::named(Type::String, "io.debezium.time.ZonedTimestamp"),
        Kind::Interval => Schema::named(Type::Int64, "io.debezium.time.MicroDuration"),
        Kind::IntervalString => Schema::named(Type::String, "io.debezium.time.Interval"),
        Kind::Money(DecimalHandlingMode::Precise) => decimal(None, 2),
        Kind::Money(DecimalHandlingMode::String) => Schema::of(Type::String),
        Kind::Money(DecimalHandlingMode::Double) => Schema::of(Type::Float64),
        Kind::Bits => Schema {
            params: if typmod > 0 {
                vec![("length", typmod.to_string())]
            } else {
                Vec::new()
            },
            ..Schema::named(Type::Bytes, "io.debezium.data.Bits")
        },
        Kind::Hstore => Schema::named(Type::String, "io.debezium.data.Json"),
        Kind::Point => Schema {
            doc: Some("Geometry (POINT)"),
            ..Schema::named(
                Type::Struct(vec![
                    Schema::field("x", Schema::of(Type::Float64)),
                    Schema::field("y", Schema::of(Type::Float64)),
                    Schema::field("wkb", Schema::of(Type::Bytes).optional()),
                    Schema::field("srid", Schema::of(Type::Int32).optional()),
                ]),
                "io.debezium.data.geometry.Point",
            )
        },
    }
}

/// One column as the key and row schemas see it.
#[derive(Debug, Clone)]
pub(crate) struct ColumnSchema {
    pub name: String,
    pub schema: Schema,
    /// Required (see the module doc's rule); else optional.
    pub required: bool,
    /// In `before`/`after`.
    pub included: bool,
}

/// Debezium's `source` block for PostgreSQL, with the fields walrelay's
/// JSON writes (docs/compatibility.md: no `ts_us`/`ts_ns`); message
/// events carry the same block.
pub(crate) fn source() -> Schema {
    let string = || Schema::of(Type::String);
    let opt_long = || Schema::of(Type::Int64).optional();
    let snapshot = Schema {
        params: vec![(
            "allowed",
            "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"
                .to_owned(),
        )],
        default: Some("false"),
        ..Schema::named(Type::String, ENUM).optional()
    };
    Schema::named(
        Type::Struct(vec![
            Schema::field("version", string()),
            Schema::field("connector", string()),
            Schema::field("name", string()),
            Schema::field("ts_ms", Schema::of(Type::Int64)),
            Schema::field("snapshot", snapshot),
            Schema::field("db", string()),
            Schema::field("sequence", string().optional()),
            Schema::field("schema", string()),
            Schema::field("table", string()),
            Schema::field("txId", opt_long()),
            Schema::field("lsn", opt_long()),
            Schema::field("xmin", opt_long()),
        ]),
        "io.debezium.connector.postgresql.Source",
    )
}

/// Debezium's transaction block (`event.block`), optional.
pub(crate) fn transaction() -> Schema {
    Schema::named(
        Type::Struct(vec![
            Schema::field("id", Schema::of(Type::String)),
            Schema::field("total_order", Schema::of(Type::Int64)),
            Schema::field("data_collection_order", Schema::of(Type::Int64)),
        ]),
        "event.block",
    )
    .optional()
}

/// The key and value (envelope) schemas of a table's events.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct EventSchemas {
    /// `None`: the table's events have a null key.
    pub key: Option<Schema>,
    pub envelope: Schema,
}

/// The schemas of table `schema.table` under topic prefix `prefix` with
/// `columns` (in the relation's order), keyed by the columns at positions
/// `key` in that order (the order the JSON path writes the key in).
pub(crate) fn event_schemas(
    prefix: &str,
    schema: &str,
    table: &str,
    columns: &[ColumnSchema],
    key: Option<&[usize]>,
) -> EventSchemas {
    let base = format!(
        "{}.{}.{}",
        avro_namespace(prefix),
        avro_name(schema),
        avro_name(table)
    );
    let column = |c: &ColumnSchema| {
        let s = c.schema.clone();
        Schema::field(&c.name, if c.required { s } else { s.optional() })
    };
    let key_fields: Vec<Field> = key
        .unwrap_or_default()
        .iter()
        .filter_map(|&i| columns.get(i))
        .map(column)
        .collect();
    let key = (!key_fields.is_empty()).then(|| Schema {
        version: None,
        ..Schema::named(Type::Struct(key_fields), &format!("{base}.Key"))
    });
    let value = Schema {
        version: None,
        ..Schema::named(
            Type::Struct(columns.iter().filter(|c| c.included).map(column).collect()),
            &format!("{base}.Value"),
        )
    }
    .optional();
    let envelope = Schema {
        version: Some(ENVELOPE_VERSION),
        ..Schema::named(
            Type::Struct(vec![
                Schema::field("before", value.clone()),
                Schema::field("after", value),
                Schema::field("source", source()),
                Schema::field("op", Schema::of(Type::String)),
                Schema::field("ts_ms", Schema::of(Type::Int64).optional()),
                Schema::field("transaction", transaction()),
            ]),
            &format!("{base}.Envelope"),
        )
    };
    EventSchemas { key, envelope }
}

/// The envelope schema's `connect.version` (Debezium 2.x and later).
const ENVELOPE_VERSION: u32 = 2;

/// A name part as Avro allows it (`[A-Za-z_][A-Za-z0-9_]*`): other
/// characters become `_`, a leading digit gets a `_` before it (Debezium's
/// `avro` name adjustment).
pub(crate) fn avro_name(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 1);
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        out.push('_');
    }
    out.extend(s.chars().map(|c| {
        if c.is_ascii_alphanumeric() || c == '_' {
            c
        } else {
            '_'
        }
    }));
    out
}

/// A dotted namespace, each part as [`avro_name`] makes it.
fn avro_namespace(s: &str) -> String {
    s.split('.').map(avro_name).collect::<Vec<_>>().join(".")
}

/// The schema's text for a registry of `kind`.
pub(crate) fn text(kind: SchemaKind, schema: &Schema) -> Arc<str> {
    let value = match kind {
        SchemaKind::Protobuf => return Arc::from(protobuf::text(schema)),
        SchemaKind::Avro => avro(schema, &mut Vec::new()),
        SchemaKind::Json => {
            let mut v = json_schema(schema, None, false);
            if let Value::Object(o) = &mut v {
                let mut root = Map::new();
                root.insert(
                    "$schema".into(),
                    "http://json-schema.org/draft-07/schema#".into(),
                );
                root.append(o);
                v = Value::Object(root);
            }
            v
        }
    };
    Arc::from(value.to_string())
}

/// The Avro form of `schema` (`AvroData.fromConnectSchema`); `defined`
/// holds the full names of the records written so far (a record is
/// written once, then named).
fn avro(schema: &Schema, defined: &mut Vec<String>) -> Value {
    let inner = avro_required(schema, defined);
    if !schema.optional {
        return inner;
    }
    match schema.default {
        // A default value: its branch first, as Avro requires.
        Some(_) => json!([inner, "null"]),
        None => json!(["null", inner]),
    }
}

fn avro_required(schema: &Schema, defined: &mut Vec<String>) -> Value {
    let base = match &schema.ty {
        Type::Int16 => json!({"type": "int", "connect.type": "int16"}),
        Type::Int32 => json!("int"),
        Type::Int64 => json!("long"),
        Type::Float32 => json!("float"),
        Type::Float64 => json!("double"),
        Type::Boolean => json!("boolean"),
        Type::String => json!("string"),
        Type::Bytes => json!("bytes"),
        Type::Array(item) => json!({"type": "array", "items": avro(item, defined)}),
        Type::Struct(fields) => {
            let full = schema.name.clone().unwrap_or_default();
            if defined.contains(&full) {
                return Value::String(full);
            }
            defined.push(full.clone());
            let (namespace, name) = full.rsplit_once('.').unwrap_or(("", &full));
            let mut out = Map::new();
            out.insert("type".into(), "record".into());
            out.insert("name".into(), name.into());
            if !namespace.is_empty() {
                out.insert("namespace".into(), namespace.into());
            }
            let fields: Vec<Value> = fields
                .iter()
                .map(|f| {
                    let mut field = Map::new();
                    field.insert("name".into(), f.name.as_str().into());
                    field.insert("type".into(), avro(&f.schema, defined));
                    if f.schema.optional {
                        field.insert(
                            "default".into(),
                            f.schema.default.map_or(Value::Null, Value::from),
                        );
                    }
                    Value::Object(field)
                })
                .collect();
            out.insert("fields".into(), Value::Array(fields));
            add_connect_props(&mut out, schema);
            return Value::Object(out);
        }
    };
    let has_props = schema.name.is_some() || schema.decimal.is_some();
    if !has_props {
        return base;
    }
    let mut out = match base {
        Value::Object(o) => o,
        other => {
            let mut o = Map::new();
            o.insert("type".into(), other);
            o
        }
    };
    if let Some((precision, scale)) = schema.decimal {
        out.insert("scale".into(), scale.into());
        out.insert("precision".into(), precision.into());
    }
    add_connect_props(&mut out, schema);
    let logical = match schema.name.as_deref() {
        Some(DECIMAL) => Some("decimal"),
        Some("org.apache.kafka.connect.data.Date") => Some("date"),
        Some("org.apache.kafka.connect.data.Time") => Some("time-millis"),
        Some("org.apache.kafka.connect.data.Timestamp") => Some("timestamp-millis"),
        _ => None,
    };
    if let Some(logical) = logical {
        out.insert("logicalType".into(), logical.into());
    }
    Value::Object(out)
}

/// `connect.doc`, `connect.version`, `connect.default`,
/// `connect.parameters`, `connect.name`, in `AvroData`'s order.
fn add_connect_props(out: &mut Map<String, Value>, schema: &Schema) {
    if let Some(doc) = schema.doc {
        out.insert("connect.doc".into(), doc.into());
    }
    if let Some(v) = schema.version {
        out.insert("connect.version".into(), v.into());
    }
    if let Some(d) = schema.default {
        out.insert("connect.default".into(), d.into());
    }
    add_parameters(out, schema);
    if let Some(name) = &schema.name {
        out.insert("connect.name".into(), name.as_str().into());
    }
}

/// `connect.parameters`, when `schema` has any (both forms write them
/// alike).
fn add_parameters(out: &mut Map<String, Value>, schema: &Schema) {
    if !schema.params.is_empty() {
        let params: Map<String, Value> = schema
            .params
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Value::from(v.as_str())))
            .collect();
        out.insert("connect.parameters".into(), Value::Object(params));
    }
}

/// The JSON Schema form of `schema` (`JsonSchemaData.fromConnectSchema`):
/// field `index` as `connect.index`; optional ones as `oneOf` null or it.
fn json_schema(schema: &Schema, index: Option<usize>, ignore_optional: bool) -> Value {
    let mut out = Map::new();
    match &schema.ty {
        Type::Int16 | Type::Int32 | Type::Int64 => {
            out.insert("type".into(), "integer".into());
        }
        Type::Float32 | Type::Float64 => {
            out.insert("type".into(), "number".into());
        }
        Type::Boolean => {
            out.insert("type".into(), "boolean".into());
        }
        Type::String => {
            out.insert("type".into(), "string".into());
        }
        Type::Bytes if schema.decimal.is_some() => {
            out.insert("type".into(), "number".into());
        }
        Type::Bytes => {
            out.insert("type".into(), "string".into());
        }
        Type::Array(item) => {
            out.insert("type".into(), "array".into());
            out.insert("items".into(), json_schema(item, None, false));
        }
        Type::Struct(fields) => {
            if schema.optional && !ignore_optional {
                let mut o = Map::new();
                let inner = json_schema(schema, None, true);
                o.insert("oneOf".into(), json!([{"type": "null"}, inner]));
                if let Some(i) = index {
                    o.insert("connect.index".into(), i.into());
                }
                return Value::Object(o);
            }
            out.insert("type".into(), "object".into());
            let props: Map<String, Value> = fields
                .iter()
                .enumerate()
                .map(|(i, f)| (f.key.clone(), json_schema(&f.schema, Some(i), false)))
                .collect();
            out.insert("properties".into(), Value::Object(props));
        }
    }
    let connect_type = match &schema.ty {
        Type::Int16 => Some("int16"),
        Type::Int32 => Some("int32"),
        Type::Int64 => Some("int64"),
        Type::Float32 => Some("float32"),
        Type::Float64 => Some("float64"),
        Type::Bytes => Some("bytes"),
        _ => None,
    };
    if let Some(t) = connect_type {
        out.insert("connect.type".into(), t.into());
    }
    if let Some(name) = &schema.name {
        out.insert("title".into(), name.as_str().into());
    }
    if let Some(v) = schema.version {
        out.insert("connect.version".into(), v.into());
    }
    if let Some(doc) = schema.doc {
        out.insert("description".into(), doc.into());
    }
    add_parameters(&mut out, schema);
    if let Some(d) = schema.default {
        out.insert("default".into(), d.into());
    }
    if schema.optional && !ignore_optional {
        let mut o = Map::new();
        o.insert(
            "oneOf".into(),
            json!([{"type": "null"}, Value::Object(out)]),
        );
        if let Some(i) = index {
            o.insert("connect.index".into(), i.into());
        }
        return Value::Object(o);
    }
    if let Some(i) = index {
        out.insert("connect.index".into(), i.into());
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests;
