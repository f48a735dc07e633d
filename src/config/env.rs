//! Names of environment variables, as config may write them (secrets are read from the
//! environment, never from config).

/// Whether `text` can name an environment variable: a letter or `_`, then letters, digits
/// and `_`.
pub(super) fn is_env_name(text: &str) -> bool {
    text.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}
