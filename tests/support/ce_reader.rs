//! Reads CloudEvents Kafka records back with the CloudEvents Rust SDK
//! (`cloudevents-sdk`), and checks what the SDK does not: the rules of
//! CloudEvents 1.0.2 and its Kafka protocol binding that a reader can see.
//!
//! The SDK's own Kafka binding (its `rdkafka` feature) needs rdkafka 0.38
//! built with cmake, which cannot share a build with our rdkafka 0.39; this
//! file is that binding's receiver (Kafka protocol binding section 3: a
//! `content-type` starting with `application/cloudevents` is structured,
//! else binary; `ce_` headers are attributes or extensions, `content-type`
//! is `datacontenttype`) over plain headers and value, handing the SDK's
//! own deserializers and event builder the work of typing and validating
//! the attributes (`time` as RFC 3339, `dataschema` as an absolute URI,
//! required attributes present, the JSON event format).
//!
//! Used by the router's unit tests (`#[path]`) and the end-to-end tests.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use cloudevents::Event;
use cloudevents::event::{AttributesReader, ExtensionValue, SpecVersion};
use cloudevents::message::{
    BinaryDeserializer, BinarySerializer, Encoding, Error, MessageAttributeValue,
    MessageDeserializer, Result, StructuredDeserializer, StructuredSerializer,
};

/// A Kafka record as a consumer sees it.
#[derive(Debug, Clone)]
pub struct KafkaRecord {
    pub headers: Vec<(String, Vec<u8>)>,
    pub value: Option<Vec<u8>>,
}

impl KafkaRecord {
    fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_slice())
    }
}

fn text(bytes: Vec<u8>) -> Result<String> {
    String::from_utf8(bytes).map_err(|e| Error::Other {
        source: Box::new(e),
    })
}

impl BinaryDeserializer for KafkaRecord {
    fn deserialize_binary<R: Sized, V: BinarySerializer<R>>(self, mut visitor: V) -> Result<R> {
        let version = self
            .header("ce_specversion")
            .ok_or(Error::WrongEncoding {})?;
        let version = SpecVersion::try_from(text(version.to_vec())?.as_str())?;
        let attributes = version.attribute_names();
        visitor = visitor.set_spec_version(version)?;
        for (name, value) in self.headers {
            if name == "content-type" {
                visitor = visitor.set_attribute(
                    "datacontenttype",
                    MessageAttributeValue::String(text(value)?),
                )?;
                continue;
            }
            let Some(attribute) = name.strip_prefix("ce_") else {
                continue;
            };
            if attribute == "specversion" {
                continue;
            }
            let value = MessageAttributeValue::String(text(value)?);
            visitor = if attributes.contains(&attribute) {
                visitor.set_attribute(attribute, value)?
            } else {
                visitor.set_extension(attribute, value)?
            };
        }
        match self.value {
            Some(value) => visitor.end_with_data(value),
            None => visitor.end(),
        }
    }
}

impl StructuredDeserializer for KafkaRecord {
    fn deserialize_structured<R: Sized, V: StructuredSerializer<R>>(self, visitor: V) -> Result<R> {
        visitor.set_structured_event(self.value.ok_or(Error::WrongEncoding {})?)
    }
}

impl MessageDeserializer for KafkaRecord {
    fn encoding(&self) -> Encoding {
        let structured = self.header("content-type").is_some_and(|v| {
            String::from_utf8_lossy(v)
                .to_ascii_lowercase()
                .starts_with("application/cloudevents")
        });
        if structured {
            Encoding::STRUCTURED
        } else if self.header("ce_specversion").is_some() {
            Encoding::BINARY
        } else {
            Encoding::UNKNOWN
        }
    }
}

/// The event in a Kafka record, read by the SDK; panics with the SDK's
/// reason when it is not one.
pub fn read_event(headers: &[(String, Vec<u8>)], value: Option<&[u8]>) -> Event {
    let record = KafkaRecord {
        headers: headers.to_vec(),
        value: value.map(<[u8]>::to_vec),
    };
    let encoding = record.encoding();
    let event = MessageDeserializer::into_event(record)
        .unwrap_or_else(|e| panic!("not a CloudEvent ({encoding:?}): {e}"));
    let problems = spec_problems(&event, headers);
    assert!(problems.is_empty(), "{problems:?} in {event}");
    event
}

/// CloudEvents 1.0.2 rules a reader can check that the SDK does not
/// enforce: required attributes non-empty (3.1), `source` a URI-reference,
/// extension attribute names lower-case letters and digits, at most 20
/// characters as recommended (3.1.1), and in binary mode every `ce_`
/// header named `ce_` + a valid attribute name (Kafka binding 3.2.3).
pub fn spec_problems(event: &Event, headers: &[(String, Vec<u8>)]) -> Vec<String> {
    let mut out = Vec::new();
    if event.specversion() != SpecVersion::V10 {
        out.push(format!("specversion {}", event.specversion()));
    }
    if event.id().is_empty() {
        out.push("empty id".into());
    }
    if event.ty().is_empty() {
        out.push("empty type".into());
    }
    let source = event.source().as_str();
    if source.is_empty()
        || !source
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~:/?#[]@!$&'()*+,;=%".contains(&b))
    {
        out.push(format!("source {source:?} is not a URI-reference"));
    }
    if event.subject().is_some_and(str::is_empty) {
        out.push("empty subject".into());
    }
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.len() <= 20
            && n.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    for (name, value) in event.iter_extensions() {
        if !name_ok(name) {
            out.push(format!("extension name {name:?}"));
        }
        if let ExtensionValue::String(s) = value
            && name == "traceparent"
            && s.len() < 55
        {
            out.push(format!("traceparent {s:?}"));
        }
    }
    for (name, _) in headers {
        if let Some(attribute) = name.strip_prefix("ce_")
            && !name_ok(attribute)
        {
            out.push(format!("header {name:?} is not ce_ + an attribute name"));
        }
    }
    out
}
