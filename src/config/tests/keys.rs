//! Every key of the schema, derived from the schema itself: the file's
//! `Deserialize` impls run against a deserializer that answers no value but
//! records the field names serde asks for. A key added to a struct in
//! `schema.rs` or `schema/` is found here without anyone listing it, so the checks that
//! `config/example.toml` and `docs/configuration.md` name every key cannot
//! drift from the code.

use std::cell::RefCell;
use std::collections::BTreeSet;

use serde::Deserialize;
use serde::de::value::Error;
use serde::de::{
    self, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, SeqAccess, Visitor,
};

use super::super::Document;

/// One key of the schema: its path from the file's top, and at which
/// segments an array of tables is crossed (`table[].column_mask[].salt`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Key {
    pub segments: Vec<&'static str>,
    pub arrays: BTreeSet<usize>,
}

impl Key {
    /// `outbox[].table`, `kafka.librdkafka`.
    pub fn path(&self) -> String {
        let mut out = String::new();
        for (i, segment) in self.segments.iter().enumerate() {
            if i > 0 {
                out.push('.');
            }
            out.push_str(segment);
            if self.arrays.contains(&i) {
                out.push_str("[]");
            }
        }
        out
    }

    /// The section's path without array markers (`table.column_mask`), as
    /// TOML headers write it; empty for the file's top level.
    pub fn section(&self) -> String {
        self.segments[..self.segments.len() - 1].join(".")
    }

    /// The key's own name (`salt`).
    pub fn name(&self) -> &'static str {
        self.segments[self.segments.len() - 1]
    }
}

/// Every leaf key of the file (a key whose value is not a table of known
/// keys; `kafka.librdkafka`, a free-form map, is one), in path order.
pub(super) fn schema_keys() -> Vec<Key> {
    let mut out = Vec::new();
    explore(Vec::new(), &mut out);
    out.sort();
    out
}

/// What the probe found at the end of the path it followed.
#[derive(Default)]
struct Found {
    /// The field names of the struct there; `None` for any other value.
    fields: Option<&'static [&'static str]>,
    /// Depths (indices into the path) at which a sequence was crossed.
    arrays: BTreeSet<usize>,
}

fn explore(path: Vec<&'static str>, out: &mut Vec<Key>) {
    let found = RefCell::new(Found::default());
    // The probe never yields a value: the result is always an error.
    let _ = Document::deserialize(Probe {
        path: &path,
        depth: 0,
        found: &found,
    });
    let found = found.into_inner();
    match found.fields {
        Some(fields) => {
            assert!(!fields.is_empty(), "a struct without fields at {path:?}");
            for field in fields {
                let mut deeper = path.clone();
                deeper.push(field);
                explore(deeper, out);
            }
        }
        None => {
            // An array of values (`header_columns`) is a value, not a
            // section: only arrays of tables are marked.
            let mut arrays = found.arrays;
            arrays.remove(&(path.len() - 1));
            out.push(Key {
                segments: path,
                arrays,
            })
        }
    }
}

/// A deserializer that follows `path` through structs, options and
/// sequences, and records what it finds where the path ends.
#[derive(Clone, Copy)]
struct Probe<'a> {
    path: &'a [&'static str],
    depth: usize,
    found: &'a RefCell<Found>,
}

impl<'a> Probe<'a> {
    fn leaf(self) -> Error {
        de::Error::custom(format!("a value at {:?}", &self.path[..self.depth]))
    }
}

impl<'de, 'a> Deserializer<'de> for Probe<'a> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Error> {
        Err(self.leaf())
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.path.get(self.depth) {
            None => {
                self.found.borrow_mut().fields = Some(fields);
                Err(self.leaf())
            }
            Some(&field) => visitor.visit_map(OneField {
                key: Some(field),
                value: Probe {
                    depth: self.depth + 1,
                    ..self
                },
            }),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_some(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        // The index of the segment that named the array.
        if let Some(depth) = self.depth.checked_sub(1) {
            self.found.borrow_mut().arrays.insert(depth);
        }
        visitor.visit_seq(OneElement(Some(self)))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct tuple tuple_struct map enum
        identifier ignored_any
    }
}

/// A table with one key, whose value is probed further.
struct OneField<'a> {
    key: Option<&'static str>,
    value: Probe<'a>,
}

impl<'de, 'a> MapAccess<'de> for OneField<'a> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        self.key
            .take()
            .map(|key| seed.deserialize(key.into_deserializer()))
            .transpose()
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        seed.deserialize(self.value)
    }
}

/// An array with one element, probed further.
struct OneElement<'a>(Option<Probe<'a>>);

impl<'de, 'a> SeqAccess<'de> for OneElement<'a> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        self.0
            .take()
            .map(|probe| seed.deserialize(probe))
            .transpose()
    }
}
