//! A value written once or as an array (`rate = "5/s"` or `rate = ["5/s", "100/h"]`),
//! each element with its span.

use std::fmt;
use std::marker::PhantomData;
use std::ops::Range;

use serde::de::{self, IntoDeserializer, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use toml::Spanned;

/// A value that may be written once or as an array, each item with its span if known.
#[derive(Clone, Debug, Default)]
pub(crate) struct OneOrMany<T>(pub(crate) Vec<(T, Option<Range<usize>>)>);

impl<'de, T> Deserialize<'de> for OneOrMany<T>
where
    T: Deserialize<'de>,
{
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct OneOrManyVisitor<T>(PhantomData<T>);

        impl<'de, T: Deserialize<'de>> Visitor<'de> for OneOrManyVisitor<T> {
            type Value = OneOrMany<T>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a value or an array of values")
            }

            fn visit_str<E: de::Error>(self, value: &str) -> Result<Self::Value, E> {
                Ok(OneOrMany(vec![(
                    T::deserialize(value.into_deserializer())?,
                    None,
                )]))
            }

            fn visit_i64<E: de::Error>(self, value: i64) -> Result<Self::Value, E> {
                Ok(OneOrMany(vec![(
                    T::deserialize(value.into_deserializer())?,
                    None,
                )]))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<Spanned<T>>()? {
                    let span = item.span();
                    items.push((item.into_inner(), Some(span)));
                }
                Ok(OneOrMany(items))
            }
        }

        deserializer.deserialize_any(OneOrManyVisitor(PhantomData))
    }
}
