//! Strict parsing of input files: the data model ignores unknown fields (so hooks survive a
//! newer `wt`), but a pack or agent file with a misspelt field must be refused.
//! [`deserialize`] wraps any serde deserializer and fails on the first field a struct does
//! not define, with serde's usual message (``unknown field `colour`, expected one of …``).
//! The error is raised while the deserializer reads the key, so formats that track
//! positions (TOML) point at the offending line.
//!
//! Hidden since SDK 1.2 and removed in SDK 2.0: `wt` now reads its pack and agent files itself
//! (`host/src/strict.rs`). Hooks never need it.
//!
//! ```
//! use windtunnel_model::{Scenario, strict};
//!
//! let text = r#"{"id": "s", "turns": ["hi"], "colour": "red"}"#;
//! let mut de = serde_json::Deserializer::from_str(text);
//! let err = strict::deserialize::<Scenario, _>(&mut de).unwrap_err();
//! assert!(err.to_string().starts_with("unknown field `colour`"));
//!
//! // The same text read the tolerant way, as a hook reads its context:
//! let scenario: Scenario = serde_json::from_str(text).unwrap();
//! assert_eq!(scenario.id, "s");
//! ```

use std::{cell::Cell, fmt};

use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor,
};

thread_local! {
    static STRICT: Cell<bool> = const { Cell::new(false) };
}

/// Whether a strict [`deserialize`] is in progress on this thread. Hand-written
/// `Deserialize` impls of the model consult it for checks the field list cannot express.
pub(crate) fn active() -> bool {
    STRICT.with(Cell::get)
}

struct Mode(bool);

impl Mode {
    fn enter() -> Mode {
        Mode(STRICT.with(|s| s.replace(true)))
    }
}

impl Drop for Mode {
    fn drop(&mut self) {
        STRICT.with(|s| s.set(self.0));
    }
}

/// Deserializes a `T` from `deserializer`, refusing any field a struct in `T` does not
/// define, an unknown tool-effect kind, and effect fields that do not apply to the effect's
/// kind.
///
/// Free-form JSON members (a scenario's `world`, a tool's `parameters`) are not checked.
pub fn deserialize<'de, T, D>(deserializer: D) -> Result<T, D::Error>
where
    T: de::Deserialize<'de>,
    D: Deserializer<'de>,
{
    let _mode = Mode::enter();
    T::deserialize(Strict(deserializer))
}

/// A deserializer that checks every struct's keys against its field list.
struct Strict<D>(D);

/// Wraps a visitor so that what it visits is deserialized strictly too; `fields` is the
/// field list when the visitor reads a struct.
struct Wrap<V> {
    inner: V,
    fields: Option<&'static [&'static str]>,
}

impl<V> Wrap<V> {
    fn new(inner: V) -> Self {
        Wrap {
            inner,
            fields: None,
        }
    }
}

macro_rules! forward_deserializer {
    ($wrap:expr; $($method:ident),* $(,)?) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
            self.0.$method($wrap(visitor))
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Strict<D> {
    type Error = D::Error;

    forward_deserializer!(Wrap::new;
        deserialize_any, deserialize_bool, deserialize_i8, deserialize_i16, deserialize_i32,
        deserialize_i64, deserialize_i128, deserialize_u8, deserialize_u16, deserialize_u32,
        deserialize_u64, deserialize_u128, deserialize_f32, deserialize_f64, deserialize_char,
        deserialize_str, deserialize_string, deserialize_bytes, deserialize_byte_buf,
        deserialize_option, deserialize_unit, deserialize_seq, deserialize_map,
        deserialize_identifier, deserialize_ignored_any,
    );

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.deserialize_unit_struct(name, Wrap::new(visitor))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.deserialize_newtype_struct(name, Wrap::new(visitor))
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.deserialize_tuple(len, Wrap::new(visitor))
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0
            .deserialize_tuple_struct(name, len, Wrap::new(visitor))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        let visitor = Wrap {
            inner: visitor,
            fields: Some(fields),
        };
        self.0.deserialize_struct(name, fields, visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.deserialize_enum(name, variants, Wrap::new(visitor))
    }

    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

macro_rules! forward_visit {
    ($($method:ident($ty:ty)),* $(,)?) => {$(
        fn $method<E: de::Error>(self, v: $ty) -> Result<Self::Value, E> {
            self.inner.$method(v)
        }
    )*};
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Wrap<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.expecting(f)
    }

    forward_visit!(
        visit_bool(bool),
        visit_i8(i8),
        visit_i16(i16),
        visit_i32(i32),
        visit_i64(i64),
        visit_i128(i128),
        visit_u8(u8),
        visit_u16(u16),
        visit_u32(u32),
        visit_u64(u64),
        visit_u128(u128),
        visit_f32(f32),
        visit_f64(f64),
        visit_char(char),
        visit_str(&str),
        visit_borrowed_str(&'de str),
        visit_string(String),
        visit_bytes(&[u8]),
        visit_borrowed_bytes(&'de [u8]),
        visit_byte_buf(Vec<u8>),
    );

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        self.inner.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        self.inner.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.inner.visit_some(Strict(d))
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.inner.visit_newtype_struct(Strict(d))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        self.inner.visit_seq(StrictSeq(seq))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        self.inner.visit_map(StrictMap {
            inner: map,
            fields: self.fields,
        })
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Self::Value, A::Error> {
        self.inner.visit_enum(StrictEnum(data))
    }
}

/// A seed whose value is deserialized strictly.
struct StrictSeed<S>(S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for StrictSeed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.0.deserialize(Strict(d))
    }
}

struct StrictSeq<A>(A);

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for StrictSeq<A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, A::Error> {
        self.0.next_element_seed(StrictSeed(seed))
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

struct StrictMap<A> {
    inner: A,
    fields: Option<&'static [&'static str]>,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for StrictMap<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        match self.fields {
            Some(fields) => self.inner.next_key_seed(KeySeed { seed, fields }),
            None => self.inner.next_key_seed(StrictSeed(seed)),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.inner.next_value_seed(StrictSeed(seed))
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

struct StrictEnum<A>(A);

impl<'de, A: EnumAccess<'de>> EnumAccess<'de> for StrictEnum<A> {
    type Error = A::Error;
    type Variant = StrictVariant<A::Variant>;

    fn variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Self::Variant), A::Error> {
        self.0
            .variant_seed(seed)
            .map(|(value, variant)| (value, StrictVariant(variant)))
    }
}

struct StrictVariant<A>(A);

impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for StrictVariant<A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        self.0.unit_variant()
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, A::Error> {
        self.0.newtype_variant_seed(StrictSeed(seed))
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        self.0.tuple_variant(len, Wrap::new(visitor))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        let visitor = Wrap {
            inner: visitor,
            fields: Some(fields),
        };
        self.0.struct_variant(fields, visitor)
    }
}

/// The seed of a struct's key: checks the key against the struct's fields before the
/// struct's own field visitor sees it.
struct KeySeed<K> {
    seed: K,
    fields: &'static [&'static str],
}

impl<'de, K: DeserializeSeed<'de>> DeserializeSeed<'de> for KeySeed<K> {
    type Value = K::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<K::Value, D::Error> {
        self.seed.deserialize(KeyCheck {
            inner: d,
            fields: self.fields,
        })
    }
}

struct KeyCheck<D> {
    inner: D,
    fields: &'static [&'static str],
}

macro_rules! forward_key {
    ($($method:ident),* $(,)?) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
            self.inner.$method(KeyVisitor { inner: visitor, fields: self.fields })
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for KeyCheck<D> {
    type Error = D::Error;

    forward_key!(
        deserialize_any,
        deserialize_bool,
        deserialize_i8,
        deserialize_i16,
        deserialize_i32,
        deserialize_i64,
        deserialize_i128,
        deserialize_u8,
        deserialize_u16,
        deserialize_u32,
        deserialize_u64,
        deserialize_u128,
        deserialize_f32,
        deserialize_f64,
        deserialize_char,
        deserialize_str,
        deserialize_string,
        deserialize_bytes,
        deserialize_byte_buf,
        deserialize_option,
        deserialize_unit,
        deserialize_seq,
        deserialize_map,
        deserialize_identifier,
        deserialize_ignored_any,
    );

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        let fields = self.fields;
        self.inner.deserialize_unit_struct(
            name,
            KeyVisitor {
                inner: visitor,
                fields,
            },
        )
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        let fields = self.fields;
        self.inner.deserialize_newtype_struct(
            name,
            KeyVisitor {
                inner: visitor,
                fields,
            },
        )
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        let fields = self.fields;
        self.inner.deserialize_tuple(
            len,
            KeyVisitor {
                inner: visitor,
                fields,
            },
        )
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        let fields = self.fields;
        self.inner.deserialize_tuple_struct(
            name,
            len,
            KeyVisitor {
                inner: visitor,
                fields,
            },
        )
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        struct_fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        let fields = self.fields;
        self.inner.deserialize_struct(
            name,
            struct_fields,
            KeyVisitor {
                inner: visitor,
                fields,
            },
        )
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        let fields = self.fields;
        self.inner.deserialize_enum(
            name,
            variants,
            KeyVisitor {
                inner: visitor,
                fields,
            },
        )
    }

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
}

struct KeyVisitor<V> {
    inner: V,
    fields: &'static [&'static str],
}

impl<V> KeyVisitor<V> {
    fn check<E: de::Error>(&self, key: &str) -> Result<(), E> {
        if self.fields.contains(&key) {
            Ok(())
        } else {
            Err(E::unknown_field(key, self.fields))
        }
    }
}

impl<'de, V: Visitor<'de>> Visitor<'de> for KeyVisitor<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.expecting(f)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        self.check(v)?;
        self.inner.visit_str(v)
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        self.check(v)?;
        self.inner.visit_borrowed_str(v)
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        self.check(&v)?;
        self.inner.visit_string(v)
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Self::Value, E> {
        self.check(&String::from_utf8_lossy(v))?;
        self.inner.visit_bytes(v)
    }

    fn visit_borrowed_bytes<E: de::Error>(self, v: &'de [u8]) -> Result<Self::Value, E> {
        self.check(&String::from_utf8_lossy(v))?;
        self.inner.visit_borrowed_bytes(v)
    }

    fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Self::Value, E> {
        self.check(&String::from_utf8_lossy(&v))?;
        self.inner.visit_byte_buf(v)
    }

    // Struct keys are strings; a format that hands over an integer key (a field index) is
    // passed through unchecked.
    forward_visit!(
        visit_bool(bool),
        visit_i8(i8),
        visit_i16(i16),
        visit_i32(i32),
        visit_i64(i64),
        visit_i128(i128),
        visit_u8(u8),
        visit_u16(u16),
        visit_u32(u32),
        visit_u64(u64),
        visit_u128(u128),
        visit_f32(f32),
        visit_f64(f64),
        visit_char(char),
    );

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        self.inner.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        self.inner.visit_unit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AgentConfig, Scenario, ToolEffect};

    fn strict<T: de::DeserializeOwned>(text: &str) -> Result<T, serde_json::Error> {
        deserialize(&mut serde_json::Deserializer::from_str(text))
    }

    #[test]
    fn refuses_unknown_fields_at_any_depth() {
        let err = strict::<Scenario>(
            r#"{"id": "s", "turns": ["x"], "expect": {"outcome": {"reply_contain": ["a"]}}}"#,
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("unknown field `reply_contain`, expected one of"),
            "{err}"
        );
        let err = strict::<AgentConfig>(
            r#"{"label": "a", "runtime": "demo", "sampling": {"temprature": 0}}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("`temprature`"), "{err}");
    }

    #[test]
    fn free_form_json_is_not_checked() {
        let s = strict::<Scenario>(
            r#"{"id": "s", "turns": ["x"], "world": {"anything": {"goes": 1}},
                "tools": [{"name": "t", "parameters": {"type": "object", "x-extra": 1},
                           "effect": {"kind": "read", "path": "anything"}}]}"#,
        )
        .unwrap();
        assert_eq!(s.tools.len(), 1);
    }

    #[test]
    fn refuses_bad_effects_but_only_when_strict() {
        let typo = r#"{"kind": "read", "path": "p", "key_ar": "id"}"#;
        let err = strict::<ToolEffect>(typo).unwrap_err();
        assert!(err.to_string().contains("unknown field `key_ar`"), "{err}");
        assert!(serde_json::from_str::<ToolEffect>(typo).is_ok());

        let misplaced = r#"{"kind": "append", "path": "p", "key_arg": "id"}"#;
        let err = strict::<ToolEffect>(misplaced).unwrap_err();
        assert!(
            err.to_string()
                .contains("field `key_arg` does not apply to `append` effects"),
            "{err}"
        );

        let unknown = r#"{"kind": "delete", "path": "p"}"#;
        let err = strict::<ToolEffect>(unknown).unwrap_err();
        assert!(
            err.to_string().contains("unknown variant `delete`"),
            "{err}"
        );
        assert_eq!(
            serde_json::from_str::<ToolEffect>(unknown).unwrap(),
            ToolEffect::Unknown
        );
        assert!(!active(), "strict mode ends with the call");
    }
}
