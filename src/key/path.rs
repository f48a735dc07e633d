//! The route half of a request key: the request path, normalised.
//!
//! Normalising is what stops `/API//search/./` from slipping past a rule written for
//! `api/search`: the query is not part of the path; percent-escapes are decoded exactly once
//! (so `%2e%2e` is `..` and `%2F` is a separator, but `%252F` stays `%2F`); empty and `.`
//! segments disappear; `..` removes the segment before it and never climbs above the root;
//! there is no leading or trailing slash; optional case folding; and paths deeper than
//! `max_depth` segments are cut to that depth.
//!
//! Already-canonical paths — the common case — are borrowed, not copied.
//!
//! ```
//! use tollgate::key::{normalize_route, RouteSettings};
//!
//! let settings = RouteSettings::default();
//! assert_eq!(normalize_route("/api//search/./", &settings), "api/search");
//! assert_eq!(normalize_route("/x/../api/%73earch", &settings), "api/search");
//! assert_eq!(normalize_route("/", &settings), "");
//! ```

use std::borrow::Cow;

use percent_encoding::percent_decode_str;

/// How paths become routes: the `[key]` table.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RouteSettings {
    /// Lower-case the route before matching (`[key] case_insensitive`, default `false`).
    pub case_insensitive: bool,
    /// Route segments kept (`[key] max_depth`, default 16); deeper paths are cut.
    pub max_depth: usize,
    /// What a request key is made of (`[key] parts`, default `route, client`).
    pub parts: super::KeyParts,
}

impl RouteSettings {
    /// The default depth cap.
    pub const DEFAULT_MAX_DEPTH: usize = 16;
}

impl Default for RouteSettings {
    fn default() -> Self {
        RouteSettings {
            case_insensitive: false,
            max_depth: Self::DEFAULT_MAX_DEPTH,
            parts: super::KeyParts::default(),
        }
    }
}

/// The normalised route for a request path (or a rule key written in config).
///
/// Borrows when `path` is already canonical. See the module docs for the rules.
///
/// ```
/// use tollgate::key::{normalize_route, RouteSettings};
///
/// let mut settings = RouteSettings::default();
/// settings.case_insensitive = true;
/// settings.max_depth = 2;
/// assert_eq!(normalize_route("/API/Search/deep/er", &settings), "api/search");
/// ```
pub fn normalize_route<'a>(path: &'a str, settings: &RouteSettings) -> Cow<'a, str> {
    match canonical(path, settings) {
        Some(route) => Cow::Borrowed(route),
        None => Cow::Owned(normalize_slowly(path, settings)),
    }
}

/// The general case: decode, resolve dot segments, cut, fold.
fn normalize_slowly(path: &str, settings: &RouteSettings) -> String {
    let decoded = percent_decode_str(path).decode_utf8_lossy();
    let mut segments: Vec<&str> = Vec::new();
    for segment in decoded.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            segment => segments.push(segment),
        }
    }
    segments.truncate(settings.max_depth);
    let route = segments.join("/");
    if settings.case_insensitive {
        route.to_lowercase()
    } else {
        route
    }
}

/// `path` without its leading slash, if normalising would not change it.
///
/// One pass over the bytes: this runs on every request, and most paths are canonical.
fn canonical<'a>(path: &'a str, settings: &RouteSettings) -> Option<&'a str> {
    let route = path.strip_prefix('/').unwrap_or(path);
    let bytes = route.as_bytes();
    let (mut depth, mut segment_start) = (0, 0);
    for i in 0..=bytes.len() {
        let byte = bytes.get(i).copied().unwrap_or(b'/');
        match byte {
            b'/' => {
                match &bytes[segment_start..i] {
                    // An empty route is canonical; an empty segment anywhere else is not.
                    [] if bytes.is_empty() => return Some(route),
                    [] | [b'.'] | [b'.', b'.'] => return None,
                    _ => {}
                }
                depth += 1;
                if depth > settings.max_depth {
                    return None;
                }
                segment_start = i + 1;
            }
            b'%' => return None,
            b'A'..=b'Z' if settings.case_insensitive => return None,
            // Non-ASCII may hide upper case; let the slow path fold it.
            0x80.. if settings.case_insensitive => return None,
            _ => {}
        }
    }
    Some(route)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(path: &str) -> String {
        normalize_route(path, &RouteSettings::default()).into_owned()
    }

    #[test]
    fn normalisation_table() {
        let table = [
            ("/api/search", "api/search"),
            ("api/search", "api/search"),
            ("/api/search/", "api/search"),
            ("//api/./search/", "api/search"),
            ("/api//search/./", "api/search"),
            ("/x/../api/search", "api/search"),
            ("/../../api/search", "api/search"),
            ("/api/search/..", "api"),
            ("/api/%73earch", "api/search"),
            ("/api/search%2F", "api/search"),
            ("/api%2Fsearch", "api/search"),
            ("/api/%2e%2e/login", "login"),
            ("/api/%2E%2E/login", "login"),
            ("/api/%252e%252e/x", "api/%2e%2e/x"),
            ("/api/%zz", "api/%zz"),
            ("/api/caf%C3%A9", "api/café"),
            ("/api/%FF", "api/\u{FFFD}"),
            ("/", ""),
            ("", ""),
            ("//", ""),
            ("/.", ""),
            ("/API/Search", "API/Search"),
        ];
        for (path, expected) in table {
            assert_eq!(route(path), expected, "path {path:?}");
        }
    }

    #[test]
    fn canonical_paths_are_borrowed() {
        let settings = RouteSettings::default();
        assert!(matches!(
            normalize_route("/api/search/x", &settings),
            Cow::Borrowed("api/search/x")
        ));
        assert!(matches!(
            normalize_route("/api/search/", &settings),
            Cow::Owned(_)
        ));
    }

    #[test]
    fn case_folding_when_asked() {
        let settings = RouteSettings {
            case_insensitive: true,
            ..RouteSettings::default()
        };
        assert_eq!(normalize_route("/API/Search", &settings), "api/search");
        assert_eq!(normalize_route("/%41PI/search", &settings), "api/search");
        assert!(matches!(
            normalize_route("/api/search", &settings),
            Cow::Borrowed(_)
        ));
    }

    proptest::proptest! {
        /// The borrowed fast path never disagrees with full normalisation.
        #[test]
        fn fast_path_agrees_with_full_normalisation(
            path in "[aB/.%2eFé]{0,24}",
            case_insensitive in proptest::bool::ANY,
            max_depth in 1usize..5,
        ) {
            let settings = RouteSettings { case_insensitive, max_depth, ..RouteSettings::default() };
            proptest::prop_assert_eq!(
                normalize_route(&path, &settings).into_owned(),
                normalize_slowly(&path, &settings)
            );
        }
    }

    #[test]
    fn depth_is_capped_after_dot_segments_resolve() {
        let settings = RouteSettings {
            max_depth: 3,
            ..RouteSettings::default()
        };
        assert_eq!(normalize_route("/a/b/c/d/e", &settings), "a/b/c");
        assert_eq!(normalize_route("/a/b/c", &settings), "a/b/c");
        assert_eq!(normalize_route("/a/x/y/../../b/c/d", &settings), "a/b/c");
        let deep = "/s".repeat(10_000);
        assert_eq!(
            normalize_route(&deep, &RouteSettings::default())
                .split('/')
                .count(),
            RouteSettings::DEFAULT_MAX_DEPTH
        );
    }
}
