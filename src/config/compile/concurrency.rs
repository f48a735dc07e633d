//! A rule's `concurrency` field: a number, `"adaptive"`, or a table of both kinds' numbers.
//!
//! ```toml
//! upload = { rate = "10/s", concurrency = 2 }           # at most 2 in flight per client
//! search = { concurrency = "adaptive" }                  # follows the upstream
//! report = { concurrency = { limit = "adaptive", min = 1, max = 50, initial = 10 } }
//! ```

use toml::Spanned;

use super::super::error::Diagnostic;
use super::super::source::SourceText;
use crate::concurrency::{AdaptiveSettings, Concurrency};

/// The largest fixed cap: far beyond any upstream's useful concurrency.
const MAX_FIXED: i64 = 1_000_000;

/// Reads `concurrency`; problems go to `diagnostics`.
pub(super) fn compile_concurrency(
    source: &SourceText,
    field: &Spanned<toml::Value>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<Concurrency> {
    let span = field.span();
    let mut problem = |message: String| {
        diagnostics.push(source.at(span.clone(), message));
        None
    };
    match field.get_ref() {
        toml::Value::Integer(n) => fixed(*n).or_else(|| {
            problem(format!(
                "concurrency must be between 1 and {MAX_FIXED} requests in flight, or \"adaptive\", found {n}"
            ))
        }),
        toml::Value::String(text) if text == "adaptive" => {
            Some(Concurrency::Adaptive(AdaptiveSettings::default()))
        }
        toml::Value::Table(table) => {
            let mut settings = AdaptiveSettings::default();
            let mut adaptive = false;
            let mut cap = None;
            for (name, value) in table {
                match (name.as_str(), value) {
                    ("limit", toml::Value::String(text)) if text == "adaptive" => adaptive = true,
                    ("limit", toml::Value::Integer(n)) => match fixed(*n) {
                        Some(c) => cap = Some(c),
                        None => {
                            return problem(format!(
                                "concurrency limit must be between 1 and {MAX_FIXED}, found {n}"
                            ));
                        }
                    },
                    (key @ ("min" | "max" | "initial"), toml::Value::Integer(n)) => {
                        let Some(n) = u32::try_from(*n).ok().filter(|&n| n >= 1) else {
                            return problem(format!("concurrency {key} must be at least 1, found {n}"));
                        };
                        match key {
                            "min" => settings.min = n,
                            "max" => settings.max = n,
                            _ => settings.initial = n,
                        }
                    }
                    (other, _) => {
                        return problem(format!(
                            "concurrency takes limit (a number or \"adaptive\"), min, max and initial; found {other} = {}",
                            shown(value)
                        ));
                    }
                }
            }
            match (adaptive, cap) {
                (true, _) => {
                    let explicit_initial = table.contains_key("initial");
                    if !explicit_initial {
                        settings.initial = settings.initial.clamp(settings.min, settings.max.max(settings.min));
                    }
                    if settings.min > settings.max
                        || !(settings.min..=settings.max).contains(&settings.initial)
                    {
                        return problem(format!(
                            "adaptive concurrency needs min ≤ initial ≤ max, found min {}, initial {}, max {}",
                            settings.min, settings.initial, settings.max
                        ));
                    }
                    Some(Concurrency::Adaptive(settings))
                }
                (false, Some(cap)) if table.len() == 1 => Some(cap),
                (false, Some(_)) => problem(
                    "min, max and initial apply to limit = \"adaptive\"".to_owned(),
                ),
                (false, None) => {
                    problem("concurrency table needs limit = N or limit = \"adaptive\"".to_owned())
                }
            }
        }
        other => problem(format!(
            "concurrency is a number of requests in flight or \"adaptive\", found {}",
            shown(other)
        )),
    }
}

/// A value as an error message quotes it.
fn shown(value: &toml::Value) -> String {
    match value {
        toml::Value::String(text) => format!("\"{text}\""),
        toml::Value::Integer(n) => n.to_string(),
        other => other.type_str().to_owned(),
    }
}

fn fixed(n: i64) -> Option<Concurrency> {
    (1..=MAX_FIXED)
        .contains(&n)
        .then(|| Concurrency::Fixed(u32::try_from(n).unwrap_or(u32::MAX)))
}

#[cfg(test)]
mod tests {
    use crate::{AdaptiveSettings, Concurrency};

    use crate::config::compile::compile_for_test as compile;

    #[test]
    fn every_form_compiles() {
        let set = compile(
            "[limits]\na = { concurrency = 4 }\nb = { rate = \"5/s\", concurrency = \"adaptive\" }\n\
             c = { concurrency = { limit = \"adaptive\", min = 1, max = 50, initial = 10 } }\n\
             d = { concurrency = { limit = 7 }, per = \"global\" }\n",
        )
        .unwrap();
        let cap = |key: &str| set.get(key).unwrap().concurrency();
        assert_eq!(cap("a"), Some(Concurrency::Fixed(4)));
        assert_eq!(
            cap("b"),
            Some(Concurrency::Adaptive(AdaptiveSettings::default()))
        );
        let settings = AdaptiveSettings {
            min: 1,
            max: 50,
            initial: 10,
        };
        assert_eq!(cap("c"), Some(Concurrency::Adaptive(settings)));
        assert_eq!(cap("d"), Some(Concurrency::Fixed(7)));
        assert!(
            set.get("a").unwrap().quotas().is_empty(),
            "a cap alone needs no rate"
        );
        assert_eq!(
            set.get("a").unwrap().kind(),
            "at most 4 in flight per client"
        );
        assert_eq!(
            set.get("d").unwrap().kind(),
            "at most 7 in flight for the rule"
        );
        assert_eq!(
            set.get("b").unwrap().kind(),
            "gcra, adaptive concurrency 2..1000"
        );
    }

    #[test]
    fn bad_caps_are_refused_with_file_line_and_column() {
        let cases = [
            (
                "[limits.a]\nconcurrency = 0\n",
                "limits.toml:2:15: concurrency must be between 1 and 1000000 requests in flight, or \"adaptive\", found 0",
            ),
            (
                "[limits.a]\nconcurrency = \"lots\"\n",
                "limits.toml:2:15: concurrency is a number of requests in flight or \"adaptive\", found \"lots\"",
            ),
            (
                "[limits.a]\nconcurrency = { limit = \"adaptive\", min = 10, max = 5 }\n",
                "limits.toml:2:15: adaptive concurrency needs min ≤ initial ≤ max",
            ),
            (
                "[limits.a]\nconcurrency = { limit = 3, min = 1 }\n",
                "limits.toml:2:15: min, max and initial apply to limit = \"adaptive\"",
            ),
            (
                "[limits.a]\nconcurrency = { limt = 3 }\n",
                "limits.toml:2:15: concurrency takes limit (a number or \"adaptive\"), min, max and initial; found limt = 3",
            ),
            (
                "[limits.a]\nburst = 3\nconcurrency = 3\n",
                "rule \"a\" needs a rate such as \"100/min\", a concurrency, also limits, or unlimited = true",
            ),
        ];
        for (text, expected) in cases {
            let error = compile(text).expect_err(text);
            assert!(
                error.contains(expected),
                "{text}\n{error}\nwanted: {expected}"
            );
        }
    }
}
