//! Debezium's `table.expand.json.payload` through Kafka Connect's
//! `JsonConverter` (`schemas.enable=false`), re-done: the EventRouter parses
//! the payload's text with Jackson, infers a Connect schema from the tree
//! (`JsonSchemaData`), builds a value of that schema, and the converter
//! writes the value with Jackson. [`expand`] writes the same bytes.
//!
//! Invariants (each from Debezium 3.6's `EventRouterDelegate` and
//! `JsonSchemaData`, Kafka Connect 4.1's `JsonConverter`, Jackson 2.19):
//! - **Only an object is expanded.** A text not starting with `{` or `[`,
//!   one Jackson does not parse (nesting over 1000, a number over 1000
//!   characters, not JSON), an empty array or one whose schema cannot be
//!   inferred (elements of two kinds, of two number types, only nulls, a
//!   first element `[]`) is written as the text's JSON string
//!   ([`Expanded::AsString`]); Debezium logs "JSON expansion failed" and
//!   writes it so. Only the first JSON value is read (trailing text is
//!   ignored, as Jackson's `readTree` does).
//! - **Schema first, then the value.** Members whose value is `null` or
//!   `[]` have no schema and are left out, at any depth; a member of a
//!   schema that an object lacks (array elements of different members,
//!   merged into one schema) is written as `null`; members in the schema's
//!   order. Such a merged schema is required: a `null` element beside
//!   objects of different members fails (below). Numbers: an integer in `int` range is INT32, in `long` range
//!   INT64, any other number FLOAT64 written by Java's `Double.toString`
//!   (`3.0`, `1.0E20`, `1.0E-5`), a non-finite one as `"Infinity"`.
//! - **Where Debezium's task fails, the row fails.** A value that does not
//!   fit the inferred schema (an integer beyond `long`, array elements
//!   whose members have different types, a `null` element in an array of
//!   objects of different members, a top-level non-empty array that has a
//!   schema) makes Connect's converter throw and Debezium's task
//!   stop: [`expand`] returns `Err` with the reason, and the router stops
//!   the connector naming table, column and LSN (or dead-letters the row).
//! - **One documented difference.** When an array's object elements have
//!   different schemas, Debezium merges them in the iteration order of a
//!   `HashSet` of Connect schemas, whose hash codes include an enum's
//!   identity hash (so the order can change from one JVM to the next):
//!   walrelay merges in the elements' order. The result is equal when the
//!   elements' members do not contradict each other's order (e.g.
//!   `[{"x":1,"y":2},{"x":3}]`).
//! - **Schemas as Connect writes them** (`value_converter =
//!   "json_with_schema"`, [`WithSchema`]): `{"schema":S,"payload":V}` with
//!   S the inferred schema as `JsonConverter.asJsonSchema` writes it (type,
//!   then `items`/`fields`, `optional`, `name`; a struct named by the
//!   payload column and the members' path, none below an array of arrays;
//!   each field's `"field"` last), the payload column's schema when the
//!   payload is not expanded, and `null` for `[]` (Debezium's inferred
//!   schema for it is none).
//! - No recursion deeper than Jackson's limit (1000), so hostile input
//!   cannot overflow the stack.

use super::jackson_str;

/// Jackson 2.19's `StreamReadConstraints` defaults.
const MAX_DEPTH: usize = 1000;
const MAX_NUMBER_LEN: usize = 1000;

/// How the payload was written.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Expanded {
    /// As the inferred schema's JSON.
    Object,
    /// As the text's JSON string (not expanded, as Debezium leaves it).
    AsString,
}

/// With `value_converter = "json_with_schema"`: Connect's envelope
/// around the expanded value.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WithSchema<'a> {
    /// The payload column's own schema (JSON), written when the payload is
    /// not expanded.
    pub column_schema: &'a str,
    /// The payload column's name: the expanded struct's schema name.
    pub column: &'a str,
}

/// What the EventRouter makes of the payload.
enum Outcome {
    /// Left as the text, its schema the column's.
    AsString,
    /// `[]`: left as the text, its schema gone (`null`).
    AsStringWithoutSchema,
    Object(Node, Schema),
}

/// Writes `text` as Debezium's expanded payload (in Connect's schema
/// envelope with `with_schema`); `Err` where Debezium's task fails on it.
pub(crate) fn expand(
    out: &mut Vec<u8>,
    text: &str,
    with_schema: Option<WithSchema<'_>>,
) -> Result<Expanded, String> {
    let outcome = outcome(text, with_schema.map_or("payload", |w| w.column))?;
    let start = out.len();
    if let Some(w) = with_schema {
        out.extend_from_slice(b"{\"schema\":");
        match &outcome {
            Outcome::AsString => out.extend_from_slice(w.column_schema.as_bytes()),
            Outcome::AsStringWithoutSchema => out.extend_from_slice(b"null"),
            Outcome::Object(_, schema) => write_schema(out, schema),
        }
        out.extend_from_slice(b",\"payload\":");
    }
    let how = match &outcome {
        Outcome::AsString | Outcome::AsStringWithoutSchema => {
            jackson_str(out, text);
            Expanded::AsString
        }
        Outcome::Object(root, schema) => {
            write(out, root, schema).inspect_err(|_| out.truncate(start))?;
            Expanded::Object
        }
    };
    if with_schema.is_some() {
        out.push(b'}');
    }
    Ok(how)
}

fn outcome(text: &str, column: &str) -> Result<Outcome, String> {
    if !(text.starts_with('{') || text.starts_with('[')) {
        return Ok(Outcome::AsString);
    }
    let Ok(root) = (Parser {
        s: text.as_bytes(),
        at: 0,
    })
    .value(1) else {
        return Ok(Outcome::AsString);
    };
    let Ok(schema) = schema_of(Some(column), &root) else {
        return Ok(Outcome::AsString);
    };
    match (&root, schema) {
        (Node::Object(_), Some(schema)) => Ok(Outcome::Object(root, schema)),
        (Node::Array(_), None) => Ok(Outcome::AsStringWithoutSchema),
        (Node::Array(_), Some(_)) => Err(
            "the payload is a JSON array with a schema, which Debezium's EventRouter cannot \
             expand (Kafka Connect's JsonConverter fails the task on it)"
                .to_owned(),
        ),
        _ => Ok(Outcome::AsString),
    }
}

/// `schema` as `JsonConverter.asJsonSchema` writes it.
fn write_schema(out: &mut Vec<u8>, schema: &Schema) {
    let primitive = |out: &mut Vec<u8>, t: &str| {
        out.extend_from_slice(b"{\"type\":\"");
        out.extend_from_slice(t.as_bytes());
        out.extend_from_slice(b"\",\"optional\":true}");
    };
    match schema {
        Schema::Str => primitive(out, "string"),
        Schema::Bool => primitive(out, "boolean"),
        Schema::I32 => primitive(out, "int32"),
        Schema::I64 => primitive(out, "int64"),
        Schema::F64 => primitive(out, "double"),
        Schema::Array(items) => {
            out.extend_from_slice(b"{\"type\":\"array\",\"items\":");
            write_schema(out, items);
            out.extend_from_slice(b",\"optional\":true}");
        }
        Schema::Struct {
            fields,
            optional,
            name,
        } => {
            out.extend_from_slice(b"{\"type\":\"struct\",\"fields\":[");
            for (i, (field, s)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_schema(out, s);
                out.pop(); // the closing brace: "field" comes last
                out.extend_from_slice(b",\"field\":");
                jackson_str(out, field);
                out.push(b'}');
            }
            out.extend_from_slice(b"],\"optional\":");
            out.extend_from_slice(if *optional { b"true" } else { b"false" });
            if let Some(name) = name {
                out.extend_from_slice(b",\"name\":");
                jackson_str(out, name);
            }
            out.push(b'}');
        }
    }
}

/// A parsed JSON value (Jackson's tree).
#[derive(Debug, PartialEq)]
enum Node {
    Null,
    Bool(bool),
    /// An integer: Jackson's `IntNode`, `LongNode` or `BigIntegerNode`.
    Int(Int),
    /// A number with a fraction or an exponent: Jackson's `DoubleNode`.
    Double(f64),
    Str(String),
    Array(Vec<Node>),
    /// Members in their first appearance's place, the last value of a
    /// repeated name (Jackson's `ObjectNode.replace`).
    Object(Vec<(String, Node)>),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Int {
    I32(i32),
    I64(i64),
    Big,
}

/// The Connect schema `JsonSchemaData` infers (every one optional).
#[derive(Debug, Clone, PartialEq)]
enum Schema {
    Str,
    Bool,
    I32,
    I64,
    F64,
    Array(Box<Schema>),
    /// Fields in order; `optional` false only for the merge of an array's
    /// differing element schemas (Connect's `SchemaUtil.copySchemaBasics`
    /// does not copy `optional`).
    Struct {
        fields: Vec<(String, Schema)>,
        optional: bool,
        /// The payload column's name, then `.member` per level; none under
        /// an array of arrays (Debezium's `toConnectSchema(null, …)`).
        name: Option<String>,
    },
}

/// A Connect schema that cannot be inferred (`ConnectException`).
struct Unrecognized;

fn number_schema(n: &Node) -> Option<Schema> {
    match n {
        Node::Int(Int::I32(_)) => Some(Schema::I32),
        Node::Int(Int::I64(_)) => Some(Schema::I64),
        Node::Int(Int::Big) | Node::Double(_) => Some(Schema::F64),
        _ => None,
    }
}

/// `JsonSchemaData.toConnectSchema` (`key`: the name a struct gets):
/// `None` for a null or an empty array.
fn schema_of(key: Option<&str>, n: &Node) -> Result<Option<Schema>, Unrecognized> {
    Ok(match n {
        Node::Null => None,
        Node::Str(_) => Some(Schema::Str),
        Node::Bool(_) => Some(Schema::Bool),
        Node::Int(_) | Node::Double(_) => number_schema(n),
        Node::Array(a) if a.is_empty() => None,
        Node::Array(a) => Some(Schema::Array(Box::new(element_schema(key, a)?))),
        Node::Object(members) => {
            let mut fields: Vec<(String, Schema)> = Vec::new();
            for (name, v) in members {
                let field_key = match key {
                    Some(k) if !k.trim().is_empty() => format!("{k}.{name}"),
                    _ => name.clone(),
                };
                if let Some(s) = schema_of(Some(&field_key), v)?
                    && !fields.iter().any(|(n, _)| n == name)
                {
                    fields.push((name.clone(), s));
                }
            }
            Some(Schema::Struct {
                fields,
                optional: true,
                name: key.map(str::to_owned),
            })
        }
    })
}

fn kind(n: &Node) -> u8 {
    match n {
        Node::Null => 0,
        Node::Bool(_) => 1,
        Node::Int(_) | Node::Double(_) => 2,
        Node::Str(_) => 3,
        Node::Array(_) => 4,
        Node::Object(_) => 5,
    }
}

/// `toConnectSchemaWithCycles` with `getFirstArrayElement`: the elements
/// (nulls aside) of one kind, numbers of one schema; object elements'
/// schemas merged.
fn element_schema(key: Option<&str>, a: &[Node]) -> Result<Schema, Unrecognized> {
    let mut sample: Option<&Node> = None;
    for e in a.iter().filter(|e| **e != Node::Null) {
        let first = *sample.get_or_insert(e);
        if kind(e) != kind(first) || number_schema(e) != number_schema(first) {
            return Err(Unrecognized);
        }
    }
    match sample {
        Some(Node::Object(_)) => {
            let mut distinct: Vec<Schema> = Vec::new();
            for e in a.iter().filter(|e| matches!(e, Node::Object(_))) {
                if let Some(s) = schema_of(key, e)?
                    && !distinct.contains(&s)
                {
                    distinct.push(s);
                }
            }
            if distinct.len() == 1 {
                return Ok(distinct.remove(0));
            }
            let mut merged: Vec<(String, Schema)> = Vec::new();
            let name = key.map(str::to_owned);
            for s in distinct {
                let Schema::Struct { fields, .. } = s else {
                    unreachable!("an object's schema is a struct")
                };
                for (name, s) in fields {
                    if !merged.iter().any(|(n, _)| *n == name) {
                        merged.push((name, s));
                    }
                }
            }
            Ok(Schema::Struct {
                fields: merged,
                optional: false,
                name,
            })
        }
        Some(e) => schema_of(None, e)?.ok_or(Unrecognized),
        None => Err(Unrecognized),
    }
}

/// `toConnectData`, Connect's value validation and `JsonConverter`'s
/// writing in one pass: `Err` where a value does not fit its schema.
fn write(out: &mut Vec<u8>, n: &Node, schema: &Schema) -> Result<(), String> {
    let mismatch = |what: &str| {
        Err(format!(
            "the payload holds {what} where the schema Debezium's EventRouter infers from it \
             (table.expand.json.payload) wants {}; Kafka Connect's JsonConverter fails the \
             task on it",
            schema_name(schema)
        ))
    };
    match (n, schema) {
        (
            Node::Null,
            Schema::Struct {
                optional: false, ..
            },
        ) => {
            return Err(
                "the payload holds a null element in an array of objects of different members, \
                 whose merged schema Debezium's EventRouter makes required \
                 (table.expand.json.payload); Kafka Connect fails the task on it"
                    .to_owned(),
            );
        }
        (Node::Null, _) => out.extend_from_slice(b"null"),
        (Node::Str(s), Schema::Str) => jackson_str(out, s),
        (Node::Bool(b), Schema::Bool) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        (Node::Int(Int::I32(i)), Schema::I32) => super::push_int(out, *i),
        (Node::Int(Int::I64(i)), Schema::I64) => super::push_int(out, *i),
        (Node::Double(d), Schema::F64) => java_double(out, *d),
        (Node::Array(a), Schema::Array(element)) => {
            out.push(b'[');
            for (i, e) in a.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write(out, e, element)?;
            }
            out.push(b']');
        }
        (Node::Object(members), Schema::Struct { fields, .. }) => {
            out.push(b'{');
            for (i, (name, s)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                jackson_str(out, name);
                out.push(b':');
                match members.iter().find(|(n, _)| n == name) {
                    Some((_, v)) => write(out, v, s)?,
                    None => out.extend_from_slice(b"null"),
                }
            }
            out.push(b'}');
        }
        (Node::Int(Int::Big), _) => {
            return mismatch("an integer beyond the range of a Java long");
        }
        (n, _) => return mismatch(node_name(n)),
    }
    Ok(())
}

fn node_name(n: &Node) -> &'static str {
    match n {
        Node::Null => "null",
        Node::Bool(_) => "a boolean",
        Node::Int(Int::I32(_)) => "an int",
        Node::Int(_) => "a long",
        Node::Double(_) => "a double",
        Node::Str(_) => "a string",
        Node::Array(_) => "an array",
        Node::Object(_) => "an object",
    }
}

fn schema_name(s: &Schema) -> &'static str {
    match s {
        Schema::Str => "a string",
        Schema::Bool => "a boolean",
        Schema::I32 => "an int",
        Schema::I64 => "a long",
        Schema::F64 => "a double",
        Schema::Array(_) => "an array",
        Schema::Struct { .. } => "an object of other members",
    }
}

/// `d` as Java's `Double.toString` writes it (and Jackson's
/// `writeNumber(double)`, a non-finite value quoted): the shortest digits
/// that read back as `d`, plain between 10^-3 and 10^7 (`0.001`, `3.0`,
/// `1234567.5`), else computerized scientific (`1.0E7`, `1.0E-5`).
pub(crate) fn java_double(out: &mut Vec<u8>, d: f64) {
    if d.is_nan() {
        out.extend_from_slice(b"\"NaN\"");
        return;
    }
    if d.is_infinite() {
        out.extend_from_slice(if d > 0.0 {
            b"\"Infinity\""
        } else {
            b"\"-Infinity\""
        });
        return;
    }
    if d.is_sign_negative() {
        out.push(b'-');
    }
    if d == 0.0 {
        out.extend_from_slice(b"0.0");
        return;
    }
    // Rust's `{:e}` is the shortest round-trip form: `d.ddde±n`.
    let mut sci = format!("{:e}", d.abs());
    let plain = |sci: &str| {
        let exp = sci
            .split_once('e')
            .map_or(0, |(_, e)| e.parse().unwrap_or(0));
        (-3..7).contains(&exp)
    };
    // Java's scientific form has at least two digits, the two nearest the
    // exact value (`4.9E-324`, not `5.0E-324`): `d.0` but for subnormals.
    if !sci.contains('.') && !plain(&sci) {
        sci = format!("{:.1e}", d.abs());
    }
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: Vec<u8> = mantissa.bytes().filter(u8::is_ascii_digit).collect();
    if (-3..7).contains(&exp) {
        if exp >= 0 {
            let int_len = exp as usize + 1;
            for i in 0..int_len {
                out.push(digits.get(i).copied().unwrap_or(b'0'));
            }
            out.push(b'.');
            match digits.get(int_len..) {
                Some(frac) if !frac.is_empty() => out.extend_from_slice(frac),
                _ => out.push(b'0'),
            }
        } else {
            out.extend_from_slice(b"0.");
            out.extend(std::iter::repeat_n(b'0', (-exp - 1) as usize));
            out.extend_from_slice(&digits);
        }
    } else {
        out.push(digits[0]);
        out.push(b'.');
        match digits.get(1..) {
            Some(frac) if !frac.is_empty() => out.extend_from_slice(frac),
            _ => out.push(b'0'),
        }
        out.push(b'E');
        super::push_int(out, exp);
    }
}

/// Strict JSON (RFC 8259), as Jackson's default parser reads it.
struct Parser<'a> {
    s: &'a [u8],
    at: usize,
}

/// Jackson refuses the text.
#[derive(Debug)]
struct Refused;

impl Parser<'_> {
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.s.get(self.at) {
            self.at += 1;
        }
    }

    fn eat(&mut self, b: u8) -> bool {
        self.ws();
        if self.s.get(self.at) == Some(&b) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn literal(&mut self, word: &[u8], node: Node) -> Result<Node, Refused> {
        if self.s[self.at..].starts_with(word) {
            self.at += word.len();
            Ok(node)
        } else {
            Err(Refused)
        }
    }

    fn value(&mut self, depth: usize) -> Result<Node, Refused> {
        self.ws();
        match self.s.get(self.at) {
            Some(b'{') => {
                if depth > MAX_DEPTH {
                    return Err(Refused);
                }
                self.at += 1;
                let mut members: Vec<(String, Node)> = Vec::new();
                if self.eat(b'}') {
                    return Ok(Node::Object(members));
                }
                loop {
                    self.ws();
                    if self.s.get(self.at) != Some(&b'"') {
                        return Err(Refused);
                    }
                    let name = self.string()?;
                    if !self.eat(b':') {
                        return Err(Refused);
                    }
                    let v = self.value(depth + 1)?;
                    match members.iter_mut().find(|(n, _)| *n == name) {
                        Some(m) => m.1 = v,
                        None => members.push((name, v)),
                    }
                    if self.eat(b',') {
                        continue;
                    }
                    if self.eat(b'}') {
                        return Ok(Node::Object(members));
                    }
                    return Err(Refused);
                }
            }
            Some(b'[') => {
                if depth > MAX_DEPTH {
                    return Err(Refused);
                }
                self.at += 1;
                let mut elements = Vec::new();
                if self.eat(b']') {
                    return Ok(Node::Array(elements));
                }
                loop {
                    elements.push(self.value(depth + 1)?);
                    if self.eat(b',') {
                        continue;
                    }
                    if self.eat(b']') {
                        return Ok(Node::Array(elements));
                    }
                    return Err(Refused);
                }
            }
            Some(b'"') => Ok(Node::Str(self.string()?)),
            Some(b't') => self.literal(b"true", Node::Bool(true)),
            Some(b'f') => self.literal(b"false", Node::Bool(false)),
            Some(b'n') => self.literal(b"null", Node::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(Refused),
        }
    }

    fn number(&mut self) -> Result<Node, Refused> {
        let start = self.at;
        let digits = |p: &mut Self| {
            let from = p.at;
            while p.s.get(p.at).is_some_and(u8::is_ascii_digit) {
                p.at += 1;
            }
            p.at - from
        };
        if self.s.get(self.at) == Some(&b'-') {
            self.at += 1;
        }
        let int_start = self.at;
        let n = digits(self);
        if n == 0 || (n > 1 && self.s[int_start] == b'0') {
            return Err(Refused);
        }
        let mut integral = true;
        if self.s.get(self.at) == Some(&b'.') {
            self.at += 1;
            if digits(self) == 0 {
                return Err(Refused);
            }
            integral = false;
        }
        if let Some(b'e' | b'E') = self.s.get(self.at) {
            self.at += 1;
            if let Some(b'+' | b'-') = self.s.get(self.at) {
                self.at += 1;
            }
            if digits(self) == 0 {
                return Err(Refused);
            }
            integral = false;
        }
        let text = std::str::from_utf8(&self.s[start..self.at]).map_err(|_| Refused)?;
        if text.len() > MAX_NUMBER_LEN {
            return Err(Refused);
        }
        if integral {
            return Ok(Node::Int(match text.parse::<i64>() {
                Ok(v) => i32::try_from(v).map_or(Int::I64(v), Int::I32),
                Err(_) => Int::Big,
            }));
        }
        text.parse::<f64>().map(Node::Double).map_err(|_| Refused)
    }

    fn hex4(&mut self) -> Result<u16, Refused> {
        let h = self.s.get(self.at..self.at + 4).ok_or(Refused)?;
        let h = std::str::from_utf8(h).map_err(|_| Refused)?;
        let v = u16::from_str_radix(h, 16).map_err(|_| Refused)?;
        if !h.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Refused);
        }
        self.at += 4;
        Ok(v)
    }

    /// A string at `"`; unpaired surrogates are refused (a Rust string
    /// cannot hold them; PostgreSQL's json parsers refuse them too).
    fn string(&mut self) -> Result<String, Refused> {
        self.at += 1;
        let mut out = String::new();
        loop {
            let run = self.at;
            while let Some(&b) = self.s.get(self.at) {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.at += 1;
            }
            out.push_str(std::str::from_utf8(&self.s[run..self.at]).map_err(|_| Refused)?);
            match self.s.get(self.at) {
                Some(b'"') => {
                    self.at += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.at += 1;
                    let e = *self.s.get(self.at).ok_or(Refused)?;
                    self.at += 1;
                    let c = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let hi = self.hex4()?;
                            let cp = if (0xD800..0xDC00).contains(&hi) {
                                if !self.s[self.at..].starts_with(b"\\u") {
                                    return Err(Refused);
                                }
                                self.at += 2;
                                let lo = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return Err(Refused);
                                }
                                0x10000
                                    + ((u32::from(hi) - 0xD800) << 10)
                                    + (u32::from(lo) - 0xDC00)
                            } else {
                                u32::from(hi)
                            };
                            char::from_u32(cp).ok_or(Refused)?
                        }
                        _ => return Err(Refused),
                    };
                    out.push(c);
                }
                _ => return Err(Refused),
            }
        }
    }
}

#[cfg(test)]
mod tests;
