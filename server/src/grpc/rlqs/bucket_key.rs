//! A bucket id as a key: `name`'s value, then the values of the entries `[rlqs] key` names,
//! in that order, each one segment (percent-encoded), decided by the live rules as any key.

use std::collections::HashMap;

use tollgate::key::encode_segment;

/// Bytes in one entry's key or value at most.
pub(super) const MAX_FIELD_BYTES: usize = 1024;

/// Why a bucket id is refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum BucketIdError {
    #[error("a bucket id has no entries")]
    Empty,
    #[error("bucket id {0:?} has no \"name\" entry")]
    NoName(Vec<String>),
    #[error("bucket id entry \"{0}\" is empty or longer than {MAX_FIELD_BYTES} bytes")]
    Field(String),
    #[error("bucket id has no \"{0}\" entry, which [rlqs] key names")]
    Missing(String),
}

/// The key a bucket id makes: `name/v1/v2…`, split where a rule's client segment starts
/// (the last segment), as `(route, client)`.
pub(super) fn key_of(
    bucket: &HashMap<String, String>,
    entries: &[String],
) -> Result<(String, String), BucketIdError> {
    if bucket.is_empty() {
        return Err(BucketIdError::Empty);
    }
    for (key, value) in bucket {
        if key.is_empty()
            || value.is_empty()
            || key.len() > MAX_FIELD_BYTES
            || value.len() > MAX_FIELD_BYTES
        {
            return Err(BucketIdError::Field(key.chars().take(64).collect()));
        }
    }
    let Some(name) = bucket.get("name") else {
        let mut keys: Vec<String> = bucket.keys().take(8).cloned().collect();
        keys.sort();
        return Err(BucketIdError::NoName(keys));
    };
    let mut segments = vec![encode_segment(name).into_owned()];
    for entry in entries {
        let value = bucket
            .get(entry)
            .ok_or_else(|| BucketIdError::Missing(entry.clone()))?;
        segments.push(encode_segment(value).into_owned());
    }
    let client = segments.pop().unwrap_or_default();
    Ok((segments.join("/"), client))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    }

    #[test]
    fn name_first_then_the_named_entries_each_one_segment() {
        let entries = vec!["client_id".to_owned()];
        assert_eq!(
            key_of(
                &id(&[("name", "api"), ("client_id", "a/b"), ("env", "prod")]),
                &entries
            ),
            Ok(("api".into(), "a%2Fb".into()))
        );
        assert_eq!(
            key_of(&id(&[("name", "api")]), &[]),
            Ok((String::new(), "api".into()))
        );
        assert_eq!(
            key_of(&id(&[("name", "api")]), &entries),
            Err(BucketIdError::Missing("client_id".into()))
        );
        assert!(matches!(
            key_of(&id(&[("env", "x")]), &[]),
            Err(BucketIdError::NoName(_))
        ));
        assert_eq!(key_of(&id(&[]), &[]), Err(BucketIdError::Empty));
        assert!(matches!(
            key_of(&id(&[("name", "")]), &[]),
            Err(BucketIdError::Field(_))
        ));
    }
}
