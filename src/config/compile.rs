//! Parse → validate → compile (STYLE habit 5): config texts in, one immutable [`RuleSet`]
//! out, or every problem found, each with its file, line and column.
//!
//! Each text is parsed into its raw form ([`super::raw`]); the settings tables are folded
//! over the files in order ([`super::settings`]); rule keys are normalised with the final
//! `[key]` settings, later files replacing earlier ones rule by rule; each raw rule is
//! validated into a [`Limit`]; ids are inherited from the set being replaced so buckets
//! survive. Nothing here reads a file or knows where the texts came from.

use std::collections::{BTreeMap, HashMap};
use std::num::NonZeroU32;
use std::ops::Range;

use toml::Spanned;

use super::concurrency;
use super::error::{ConfigError, Diagnostic};
use super::raw::{OneOrMany, RawFile, RawRule};
use super::rule::{Limit, Origin, Rule, RuleId, StatusSet, display_name};
use super::rule_set::RuleSet;
use super::settings::Settings;
use super::shaping;
use super::source::SourceText;
use crate::algorithm::Algorithm;
use crate::key::{RouteSettings, normalize_route};
use crate::quota::{Quota, Rate};

impl RuleSet {
    /// Parses, validates and compiles config text into a rule set, without a store, a
    /// clock or a sweeper: for checking config in tooling (errors name the file
    /// `<inline>`). [`Limits::from_toml`](crate::Limits::from_toml) does this and starts
    /// limiting.
    ///
    /// ```
    /// use tollgate::config::RuleSet;
    ///
    /// let rules = RuleSet::from_toml("[limits]\napi = \"10/s\"\n")?;
    /// assert_eq!(rules.resolve("api/search", "192.0.2.1").unwrap().key(), "api");
    ///
    /// let error = RuleSet::from_toml("[limits]\napi = \"ten a second\"\n").unwrap_err();
    /// assert!(error.to_string().contains("<inline>:2"));
    /// # Ok::<(), tollgate::config::ConfigError>(())
    /// ```
    pub fn from_toml(text: &str) -> Result<RuleSet, ConfigError> {
        RuleSet::compile(&[SourceText::inline(text)], None).map_err(ConfigError::Invalid)
    }

    /// Validates and compiles `sources`, later files overriding earlier ones rule by rule
    /// and setting by setting.
    ///
    /// Rules that `previous` also had, with the same kind of bucket (per client, global, or
    /// none), keep their ids and so their buckets; changed numbers are carried over by the
    /// store. New rules get ids never used before.
    pub(crate) fn compile(
        sources: &[SourceText],
        previous: Option<&RuleSet>,
    ) -> Result<RuleSet, Vec<Diagnostic>> {
        let mut diagnostics = Vec::new();
        let mut parsed = Vec::new();
        for source in sources {
            // Refused rather than read as "no rules": an empty file is far more often a save
            // caught half-way, or a truncated deploy, than a wish to lift every limit.
            if source.text.trim().is_empty() {
                diagnostics.push(source.at(
                    0..0,
                    "file is empty (a save caught half-way?); write a comment in it if an empty file is intended",
                ));
                continue;
            }
            match parse(source) {
                Ok(raw) => parsed.push((source, raw)),
                Err(mut problems) => diagnostics.append(&mut problems),
            }
        }
        if !diagnostics.is_empty() {
            return Err(diagnostics);
        }

        let mut settings = Settings::default();
        for (source, raw) in &parsed {
            settings.apply(source, raw, &mut diagnostics);
        }

        // Rules: normalise with the final [key] settings, later files replacing earlier.
        let mut chosen: BTreeMap<String, (&SourceText, &Spanned<String>, &Spanned<RawRule>)> =
            BTreeMap::new();
        for (source, raw) in &parsed {
            let mut seen: HashMap<String, Range<usize>> = HashMap::new();
            for (key, rule) in &raw.limits {
                let normalised = normalize_rule_key(key.get_ref(), &settings.route);
                if let Some(first) = seen.get(&normalised) {
                    let first = source.at(first.clone(), "");
                    diagnostics.push(source.at(
                        key.span(),
                        format!(
                            "rule \"{}\" normalises to \"{}\", the same key as the rule on line {}",
                            key.get_ref(),
                            display_name(&normalised),
                            first.line
                        ),
                    ));
                    continue;
                }
                seen.insert(normalised.clone(), key.span());
                let depth = normalised.split('/').filter(|s| !s.is_empty()).count();
                if depth > settings.route.max_depth + 1 {
                    diagnostics.push(source.at(
                        key.span(),
                        format!(
                            "rule \"{}\" has {depth} segments but routes are cut at [key] max_depth = {}, so it can never match",
                            key.get_ref(),
                            settings.route.max_depth
                        ),
                    ));
                    continue;
                }
                chosen.insert(normalised, (source, key, rule));
            }
        }

        let mut rules = Vec::with_capacity(chosen.len());
        let mut next_id = previous.map_or(0, RuleSet::next_id);
        for (key, (source, raw_key, rule)) in chosen {
            let Some(limit) = compile_limit(source, raw_key, rule, &settings, &mut diagnostics)
            else {
                continue;
            };
            let inherited = previous
                .and_then(|set| set.get(&key))
                .filter(|old| old.limit().bucket_kind() == limit.bucket_kind())
                .map(Rule::id);
            let id = inherited.unwrap_or_else(|| {
                // Ids stop short of the one reserved for caller-defined buckets.
                let id = RuleId::new(next_id.min(RuleId::CALLER_DEFINED.get() - 1));
                next_id = next_id.saturating_add(1);
                id
            });
            let origin = source.at(raw_key.span(), "");
            rules.push(Rule::new(
                key,
                id,
                limit,
                Origin {
                    file: origin.file,
                    line: origin.line,
                },
            ));
        }
        if !diagnostics.is_empty() {
            return Err(diagnostics);
        }
        Ok(RuleSet::assemble(
            rules,
            settings,
            sources.iter().map(|s| s.path.clone()).collect(),
            next_id,
            previous.map_or(1, |set| set.generation() + 1),
        ))
    }
}

/// Rule keys are normalised like request paths, but never cut (a too-deep key is an error).
fn normalize_rule_key(key: &str, route: &RouteSettings) -> String {
    let uncapped = RouteSettings {
        max_depth: usize::MAX,
        ..route.clone()
    };
    normalize_route(key, &uncapped).into_owned()
}

/// One source's raw form: TOML, or envoyproxy/ratelimit's YAML for `.yaml`/`.yml` names.
fn parse(source: &SourceText) -> Result<RawFile, Vec<Diagnostic>> {
    #[cfg(feature = "yaml")]
    if super::envoy_yaml::is_yaml(&source.path) {
        return super::envoy_yaml::parse(source);
    }
    #[cfg(not(feature = "yaml"))]
    if source
        .path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml"))
    {
        return Err(vec![source.at(
            0..0,
            "envoyproxy/ratelimit YAML config needs tollgate's `yaml` feature",
        )]);
    }
    toml::from_str::<RawFile>(&source.text)
        .map_err(|error| vec![source.at(error.span().unwrap_or(0..0), error.message().trim_end())])
}

fn compile_limit(
    source: &SourceText,
    key: &Spanned<String>,
    rule: &Spanned<RawRule>,
    settings: &Settings,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<Limit> {
    let before = diagnostics.len();
    let rule_span = rule.span();
    let name = key.get_ref();
    let raw = rule.get_ref();
    if raw.unlimited.as_ref().is_some_and(|u| *u.get_ref()) {
        let others = raw.rate.is_some()
            || raw.burst.is_some()
            || raw.cost.is_some()
            || raw.strict.is_some()
            || raw.shadow.is_some()
            || raw.algorithm.is_some()
            || raw.count_status.is_some()
            || raw.on_limit.is_some()
            || raw.max_delay.is_some()
            || raw.delay_after.is_some()
            || raw.warmup.is_some()
            || raw.concurrency.is_some();
        if others {
            diagnostics.push(source.at(
                rule_span,
                format!(
                    "rule \"{name}\" is unlimited and cannot also set a rate or how it is counted"
                ),
            ));
            return None;
        }
        return Some(Limit::Unlimited);
    }
    let algorithm = raw
        .algorithm
        .as_ref()
        .map_or(Algorithm::Gcra, |a| *a.get_ref());
    if algorithm != Algorithm::Gcra {
        if let Some(burst) = &raw.burst {
            diagnostics.push(source.at(
                burst.span(),
                format!("burst applies to algorithm = \"gcra\"; a {algorithm} allows each rate's count per period"),
            ));
        }
        if let Some(strict) = raw
            .strict
            .as_ref()
            .filter(|s| *s.get_ref() && algorithm != Algorithm::SlidingLog)
        {
            diagnostics.push(source.at(
                strict.span(),
                format!("strict applies to algorithm = \"gcra\": a {algorithm} has no refill to hold back"),
            ));
        }
    }
    let count_status = raw
        .count_status
        .as_ref()
        .map(|list| compile_statuses(source, list, diagnostics));
    let concurrency = raw
        .concurrency
        .as_ref()
        .and_then(|field| concurrency::compile_concurrency(source, field, diagnostics));
    let no_rate = OneOrMany(Vec::new());
    let rate_field = match &raw.rate {
        Some(field) => Spanned::new(field.span(), &field.get_ref().0),
        // A cap on requests in flight alone needs no rate.
        None if raw.concurrency.is_some() && raw.burst.is_none() => {
            Spanned::new(rule_span.clone(), &no_rate.0)
        }
        None => {
            diagnostics.push(source.at(
                rule_span,
                format!("rule \"{name}\" needs a rate such as \"100/min\", a concurrency, or unlimited = true"),
            ));
            return None;
        }
    };
    let span_of = |span: &Option<Range<usize>>, field: Range<usize>| -> Range<usize> {
        match span {
            Some(span) => span.clone(),
            None if field.is_empty() => rule_span.clone(),
            None => field,
        }
    };
    let mut rates = Vec::new();
    for (text, span) in rate_field.get_ref().iter() {
        match text.parse::<Rate>() {
            Ok(rate) => rates.push((rate, span_of(span, rate_field.span()))),
            Err(error) => {
                diagnostics.push(source.at(span_of(span, rate_field.span()), error.to_string()))
            }
        }
    }
    if raw.rate.is_some() && rate_field.get_ref().is_empty() {
        diagnostics.push(source.at(rate_field.span(), "rate list is empty"));
    }

    let bursts: Vec<(i64, Range<usize>)> = match &raw.burst {
        None => rates
            .iter()
            .map(|(rate, span)| (i64::from(rate.count()), span.clone()))
            .collect(),
        Some(field) => {
            let OneOrMany(items) = field.get_ref();
            if items.len() != rate_field.get_ref().len() {
                diagnostics.push(source.at(
                    field.span(),
                    format!(
                        "rule \"{name}\" has {} rate(s) but {} burst value(s); give one burst per rate, or none",
                        rate_field.get_ref().len(),
                        items.len()
                    ),
                ));
                Vec::new()
            } else {
                items
                    .iter()
                    .map(|(burst, span)| (*burst, span_of(span, field.span())))
                    .collect()
            }
        }
    };
    let cost = match &raw.cost {
        None => 1,
        Some(cost) if *cost.get_ref() < 1 => {
            diagnostics.push(source.at(
                cost.span(),
                format!(
                    "cost must be at least 1, found {} (to exempt a route use unlimited = true)",
                    cost.get_ref()
                ),
            ));
            1
        }
        Some(cost) => u64::try_from(*cost.get_ref()).unwrap_or(1),
    };

    let mut quotas = Vec::new();
    if diagnostics.len() == before {
        for ((rate, _), (burst, burst_span)) in rates.iter().zip(&bursts) {
            let Some(burst) = u32::try_from(*burst).ok().and_then(NonZeroU32::new) else {
                diagnostics.push(source.at(
                    burst_span.clone(),
                    format!("burst must be between 1 and 4294967295, found {burst}"),
                ));
                continue;
            };
            if cost > u64::from(burst.get()) {
                let at = raw.cost.as_ref().map_or(rule_span.clone(), Spanned::span);
                diagnostics.push(source.at(
                    at,
                    format!(
                        "cost {cost} is larger than burst {burst} of rate \"{rate}\": such a request could never pass"
                    ),
                ));
                continue;
            }
            match Quota::new(*rate, burst) {
                Some(quota) => quotas.push(quota),
                None => diagnostics.push(source.at(
                    burst_span.clone(),
                    format!("burst {burst} at \"{rate}\" takes longer than 584 years to refill"),
                )),
            }
        }
    }
    let per = raw.per.unwrap_or_default();
    let count_status = count_status.flatten();
    let shaping = if diagnostics.len() == before {
        let context = shaping::Context {
            name,
            algorithm,
            quotas: &quotas,
            per,
            counts_status: count_status.is_some(),
            upstream_timeout: settings.gateway.upstream_timeout,
        };
        shaping::compile_shaping(source, raw, rule_span.clone(), &context, diagnostics)
    } else {
        crate::Shaping::NONE
    };
    (diagnostics.len() == before).then(|| Limit::Limited {
        quotas,
        cost,
        per,
        algorithm,
        strict: raw.strict.as_ref().is_some_and(|s| *s.get_ref()),
        shaping,
        concurrency,
        shadow: raw.shadow.as_ref().is_some_and(|s| *s.get_ref()),
        count_status,
    })
}

/// `count_status = [401, 403, "5xx"]`.
fn compile_statuses(
    source: &SourceText,
    list: &Spanned<Vec<Spanned<toml::Value>>>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<StatusSet> {
    let (mut codes, mut classes) = (Vec::new(), Vec::new());
    for item in list.get_ref() {
        match item.get_ref() {
            toml::Value::Integer(code @ 100..=599) => codes.push(*code as u16),
            toml::Value::String(class)
                if class.len() == 3
                    && class.ends_with("xx")
                    && matches!(class.as_bytes()[0], b'1'..=b'5') =>
            {
                classes.push(char::from(class.as_bytes()[0]));
            }
            other => {
                let found = match other {
                    toml::Value::String(text) => format!("\"{text}\""),
                    toml::Value::Integer(number) => number.to_string(),
                    other => other.type_str().to_owned(),
                };
                diagnostics.push(source.at(
                    item.span(),
                    format!(
                        "count_status takes status codes (401) or classes (\"5xx\"), found {found}"
                    ),
                ));
            }
        }
    }
    if list.get_ref().is_empty() {
        diagnostics.push(source.at(
            list.span(),
            "count_status is empty: list the statuses that take tokens",
        ));
        return None;
    }
    Some(StatusSet::new(codes, classes))
}

/// Compiles `text` as `limits.toml`, every problem on a line of its own: for tests.
#[cfg(test)]
pub(super) fn compile_for_test(text: &str) -> Result<RuleSet, String> {
    RuleSet::compile(&[SourceText::new("limits.toml", text)], None).map_err(|d| {
        d.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use http::{HeaderValue, StatusCode};

    use super::*;
    use crate::config::Per;
    use crate::config::source::SourceText as Source;
    use crate::response::HeaderStyle;

    use super::compile_for_test as compile;

    #[test]
    fn rule_keys_are_normalised() {
        let set = compile("[limits]\n\"/api//search/./\" = \"1/s\"\n\"\" = \"1/s\"\n").unwrap();
        let keys: Vec<_> = set.rules().iter().map(Rule::key).collect();
        assert_eq!(keys, ["", "api/search"]);
        assert_eq!(set.rules()[0].name(), "/");
    }

    #[test]
    fn quotas_burst_cost_and_per_compile() {
        let set = compile(
            r#"
            [limits.api]
            rate = ["100/min", "5/s"]
            burst = [150, 5]
            cost = 2
            [limits.export]
            rate = "50/s"
            per = "global"
            [limits.healthz]
            unlimited = true
            "#,
        )
        .unwrap();
        let api = set.resolve("api", "x").unwrap();
        let Limit::Limited {
            quotas, cost, per, ..
        } = api.limit()
        else {
            panic!("api is limited")
        };
        assert_eq!(
            quotas.iter().map(Quota::burst).collect::<Vec<_>>(),
            [150, 5]
        );
        assert_eq!((*cost, *per), (2, Per::Client));
        assert_eq!(
            api.policy(0).unwrap(),
            &HeaderValue::from_static("\"api\";q=150;w=90")
        );
        let export = set.resolve("export", "x").unwrap();
        assert!(matches!(
            export.limit(),
            Limit::Limited {
                per: Per::Global,
                ..
            }
        ));
        assert_eq!(
            set.resolve("healthz", "x").unwrap().limit(),
            &Limit::Unlimited
        );
    }

    #[test]
    fn invalid_configs_name_file_line_column_and_problem() {
        let cases = [
            (
                "[limits]\napi = \"0/s\"\n",
                "limits.toml:2:7: rate count must be at least 1",
            ),
            (
                "[limits]\napi = \"5/fortnight\"\n",
                "limits.toml:2:7: unknown time unit \"fortnight\"",
            ),
            (
                "[limits.api]\nrate = \"1/s\"\nburst = 0\n",
                "limits.toml:3:9: burst must be between 1",
            ),
            (
                "[limits.api]\nrate = \"10/s\"\ncost = 11\n",
                "limits.toml:3:8: cost 11 is larger than burst 10",
            ),
            (
                "[limits.api]\nrate = \"10/s\"\ncost = 0\n",
                "limits.toml:3:8: cost must be at least 1",
            ),
            (
                "[limits.api]\nrate = [\"1/s\", \"bad\"]\n",
                "limits.toml:2:16: expected a rate",
            ),
            (
                "[limits.api]\nrate = []\n",
                "limits.toml:2:8: rate list is empty",
            ),
            (
                "[limits.api]\nrate = [\"1/s\", \"5/m\"]\nburst = 3\n",
                "limits.toml:3:9: rule \"api\" has 2 rate(s) but 1 burst value(s)",
            ),
            (
                "[limits.api]\nburst = 3\n",
                "limits.toml:1:1: rule \"api\" needs a rate",
            ),
            (
                "[limits.api]\nunlimited = true\nrate = \"1/s\"\n",
                "rule \"api\" is unlimited and cannot also set a rate",
            ),
            (
                "[limits.api]\nunlimited = true\nshadow = true\n",
                "rule \"api\" is unlimited and cannot also set a rate",
            ),
            (
                "[limits.api]\nrate = \"1/s\"\nalgorithm = \"leaky\"\n",
                "limits.toml:3:13: unknown variant `leaky`",
            ),
            (
                "[limits.api]\nrate = \"9/s\"\nburst = 3\nalgorithm = \"fixed-window\"\n",
                "limits.toml:3:9: burst applies to algorithm = \"gcra\"; a fixed-window allows",
            ),
            (
                "[limits.api]\nrate = \"9/s\"\nstrict = true\nalgorithm = \"sliding-window\"\n",
                "limits.toml:3:10: strict applies to algorithm = \"gcra\": a sliding-window has no refill",
            ),
            (
                "[limits.api]\nrate = \"9/s\"\ncount_status = [401, \"6xx\", 99, true]\n",
                "limits.toml:3:22: count_status takes status codes (401) or classes (\"5xx\"), found \"6xx\"",
            ),
            (
                "[limits.api]\nrate = \"9/s\"\ncount_status = []\n",
                "limits.toml:3:16: count_status is empty",
            ),
            (
                "[limits.api]\nrate = \"1/s\"\nbrust = 3\n",
                "limits.toml:3:1: unknown field `brust`",
            ),
            (
                "[limits.api]\nrate = \"1/s\"\nper = \"everyone\"\n",
                "limits.toml:3:7: unknown variant `everyone`",
            ),
            (
                "[limits]\n\"/api/\" = \"1/s\"\n\"api\" = \"2/s\"\n",
                "limits.toml:3:1: rule \"api\" normalises to \"api\", the same key as the rule on line 2",
            ),
            (
                "[key]\nmax_depth = 2\n[limits]\n\"a/b/c/d\" = \"1/s\"\n",
                "limits.toml:4:1: rule \"a/b/c/d\" has 4 segments",
            ),
            (
                "[key]\nmax_depth = 0\n",
                "limits.toml:2:13: max_depth must be between 1 and 1024, found 0",
            ),
            (
                "[client]\nsources = [\"cookie:x\"]\n",
                "limits.toml:2:12: unknown client source \"cookie:x\"",
            ),
            (
                "[client]\ntrusted_proxies = [\"10.0.0.0/33\"]\n",
                "limits.toml:2:20: trusted proxy \"10.0.0.0/33\"",
            ),
            (
                "[client]\nipv6_prefix = 129\n",
                "limits.toml:2:15: ipv6_prefix must be between 1 and 128",
            ),
            (
                "[response]\nstatus = 200\n",
                "limits.toml:2:10: status must be a 4xx or 5xx code, found 200",
            ),
            (
                "[response]\nheaders = \"fancy\"\n",
                "limits.toml:2:11: unknown variant `fancy`",
            ),
            ("[limits\n", "limits.toml:1:8:"),
        ];
        for (text, expected) in cases {
            let error = compile(text).expect_err(text);
            assert!(
                error.starts_with(expected) || error.contains(expected),
                "config {text:?}\n  gave {error}\n  expected {expected}"
            );
        }
    }

    #[test]
    fn an_empty_file_is_refused_but_a_comment_is_a_valid_empty_override() {
        let error = compile(" \n").unwrap_err();
        assert!(
            error.starts_with("limits.toml:1:1: file is empty"),
            "{error}"
        );
        assert!(
            compile("# no overrides on this server\n")
                .unwrap()
                .rules()
                .is_empty()
        );
    }

    #[test]
    fn every_way_to_count_compiles() {
        let set = compile(
            r#"
            [limits.login]
            rate = "5/min"
            strict = true
            count_status = [401, 403, "5xx"]
            [limits.beta]
            rate = "10/s"
            shadow = true
            [limits.upload]
            rate = ["100/min", "10/s"]
            algorithm = "sliding-window"
            cost = 10
            "#,
        )
        .unwrap();
        let Limit::Limited {
            strict,
            count_status,
            ..
        } = set.get("login").unwrap().limit()
        else {
            panic!("limited")
        };
        assert!(*strict);
        let statuses = count_status.as_ref().unwrap();
        assert!(
            statuses.contains(StatusCode::FORBIDDEN) && statuses.contains(StatusCode::BAD_GATEWAY)
        );
        assert!(!statuses.contains(StatusCode::OK));
        assert!(matches!(
            set.get("beta").unwrap().limit(),
            Limit::Limited { shadow: true, .. }
        ));
        assert!(matches!(
            set.get("upload").unwrap().limit(),
            Limit::Limited {
                algorithm: crate::Algorithm::SlidingWindow,
                cost: 10,
                ..
            }
        ));
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let error = compile("[limits]\na = \"0/s\"\nb = \"x\"\n").unwrap_err();
        assert_eq!(error.lines().count(), 2, "{error}");
    }

    #[test]
    fn later_files_override_earlier_rule_by_rule() {
        let set = RuleSet::compile(
            &[
                Source::new(
                    "global.toml",
                    "[limits]\n\"/\" = \"10/s\"\napi = \"100/min\"\n[response]\nstatus = 503\n",
                ),
                Source::new(
                    "local.toml",
                    "[limits]\napi = \"5/min\"\n[response]\nheaders = \"both\"\n",
                ),
            ],
            None,
        )
        .unwrap();
        let api = set.resolve("api", "x").unwrap();
        assert_eq!(api.origin().file, PathBuf::from("local.toml"));
        assert!(matches!(api.limit(), Limit::Limited { quotas, .. } if quotas[0].burst() == 5));
        assert_eq!(set.resolve("other", "x").unwrap().name(), "/");
        assert_eq!(set.response().status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(set.response().headers, HeaderStyle::Both);
    }

    #[test]
    fn rule_ids_survive_recompiles_unless_the_bucket_kind_changes() {
        let first = compile("[limits]\na = \"1/s\"\nb = \"1/s\"\nc = \"1/s\"\n").unwrap();
        let second = RuleSet::compile(
            &[Source::new(
                "limits.toml",
                "[limits]\na = \"5/s\"\nb = { rate = \"1/s\", per = \"global\" }\nd = \"1/s\"\n",
            )],
            Some(&first),
        )
        .unwrap();
        let id = |set: &RuleSet, key: &str| set.get(key).map(Rule::id);
        assert_eq!(id(&second, "a"), id(&first, "a"), "a changed numbers only");
        assert_ne!(id(&second, "b"), id(&first, "b"), "b became global");
        let mut retired = second.retired_since(&first);
        retired.sort();
        let mut expected = vec![id(&first, "b").unwrap(), id(&first, "c").unwrap()];
        expected.sort();
        assert_eq!(retired, expected);
        // Restoring c later gives it an id it never had.
        let third = RuleSet::compile(
            &[Source::new(
                "limits.toml",
                "[limits]\na = \"5/s\"\nc = \"1/s\"\n",
            )],
            Some(&second),
        )
        .unwrap();
        assert_ne!(id(&third, "c"), id(&first, "c"));
        assert_eq!(id(&third, "a"), id(&first, "a"));
    }
}
