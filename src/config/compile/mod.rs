//! Parse → validate → compile (STYLE habit 5): config texts in, one immutable [`RuleSet`]
//! out, or every problem found, each with its file, line and column.
//!
//! Each text is parsed into its raw form ([`super::raw`]); the settings tables are folded
//! over the files in order ([`super::settings`]); rule keys are normalised with the final
//! `[key]` settings, later files replacing earlier ones rule by rule; each raw rule is
//! validated into a [`Limit`]; ids are inherited from the set being replaced so buckets
//! survive. Nothing here reads a file or knows where the texts came from.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::Arc;

use serde::de;
use toml::Spanned;

mod also;
mod at;
mod candidates;
mod concurrency;
mod cost;
mod limit;
mod plans;
mod shaping;

use super::error::{ConfigError, Diagnostic};
use super::extension::Extensions;
use super::raw::Per;
use super::raw::{RawFile, RawRule};
use super::rule::{Origin, Rule, RuleId, display_name};
use super::rule_set::RuleSet;
use super::settings::Settings;
use super::source::SourceText;
use crate::key::{ClientSource, RouteSettings, normalize_route};

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
        RuleSet::compile(&[SourceText::inline(text)], None, &Extensions::default())
            .map_err(ConfigError::Invalid)
    }

    /// Compiles named texts, each a membership table or not, as a reload does with what it
    /// read (for the fuzz targets).
    pub(crate) fn compile_texts(
        sources: &[(&std::path::Path, &str, bool)],
    ) -> Result<RuleSet, Vec<Diagnostic>> {
        let texts: Vec<SourceText> = sources
            .iter()
            .map(|&(path, text, members)| {
                let mut read = SourceText::new(path, text);
                read.members = members;
                read
            })
            .collect();
        RuleSet::compile(&texts, None, &Extensions::default())
    }

    /// Validates and compiles `sources`, later files overriding earlier ones rule by rule
    /// and setting by setting.
    ///
    /// Rules that `previous` also had, with the same kind of bucket (per client, global, or
    /// none), keep their ids and so their buckets; changed numbers are carried over by the
    /// store. New rules get ids never used before. `extensions` own the tables tollgate
    /// does not know, and check the result last.
    pub(crate) fn compile(
        sources: &[SourceText],
        previous: Option<&RuleSet>,
        extensions: &Extensions,
    ) -> Result<RuleSet, Vec<Diagnostic>> {
        let mut diagnostics = Vec::new();
        let mut parsed = Vec::new();
        let (members, sources): (Vec<&SourceText>, Vec<&SourceText>) =
            sources.iter().partition(|source| source.members);
        for source in sources.iter().copied() {
            // Refused rather than read as "no rules": an empty file is far more often a save
            // caught half-way, or a truncated deploy, than a wish to lift every limit.
            if source.text.trim().is_empty() {
                diagnostics.push(source.at(
                    0..0,
                    "file is empty (a save caught half-way?); write a comment in it if an empty file is intended",
                ));
                continue;
            }
            match parse(source, extensions) {
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
        settings
            .plans
            .read_members(&members, previous.map(RuleSet::plans), &mut diagnostics);
        settings.keys = settings.identity.read_keys(
            &members,
            previous.and_then(RuleSet::key_tables),
            &mut diagnostics,
        );
        settings.client.api_keys = settings.keys.as_ref().map(|read| Arc::clone(&read.keys));
        settings.client.on_invalid = settings.identity.on_invalid;
        let rules_file = sources
            .first()
            .map(|source| source.path.clone())
            .unwrap_or_default();
        settings.client.jwt = settings
            .identity
            .read_jwt(&members, &rules_file, &mut diagnostics);
        for (needed, source) in settings
            .client
            .sources
            .iter()
            .filter_map(|source| match source {
                ClientSource::Jwt(_) => Some((settings.client.jwt.is_none(), source)),
                _ => None,
            })
        {
            if needed && let Some(first) = sources.first() {
                diagnostics.push(first.at(
                    0..0,
                    format!("[client] sources names \"{source}\", but no [identity.jwt] table says how tokens are verified"),
                ));
            }
        }
        if settings.client.api_keys.is_none()
            && settings.client.sources.contains(&ClientSource::ApiKey)
            && let Some(first) = sources.first()
        {
            diagnostics.push(first.at(
                0..0,
                "[client] sources names \"api_key\", but no [identity.api_keys] table says where keys come from",
            ));
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
                let around = settings.route.parts.around_route();
                if depth > settings.route.max_depth + around + 1 {
                    diagnostics.push(source.at(
                        key.span(),
                        format!(
                            "rule \"{}\" has {depth} segments but routes are cut at [key] max_depth = {}{}, so it can never match",
                            key.get_ref(),
                            settings.route.max_depth,
                            if around > 0 { format!(" (with {around} key parts beside the route)") } else { String::new() }
                        ),
                    ));
                    continue;
                }
                chosen.insert(normalised, (source, key, rule));
            }
        }

        let mut rules = Vec::with_capacity(chosen.len());
        let mut variants = Vec::new();
        let mut candidate_variants = Vec::new();
        let mut also_variants = Vec::new();
        let mut next_id = previous.map_or(0, RuleSet::next_id);
        // Ids stop short of the one reserved for caller-defined buckets.
        let mut new_id = || {
            let id = RuleId::new(next_id.min(RuleId::CALLER_DEFINED.get() - 1));
            next_id = next_id.saturating_add(1);
            id
        };
        for (key, (source, raw_key, rule)) in chosen {
            let Some(limit) = limit::compile_limit(source, raw_key, rule, &mut diagnostics) else {
                continue;
            };
            let plans = plans::compile_plans(source, raw_key, rule, &mut diagnostics);
            let candidates =
                candidates::compile_candidates(source, raw_key, rule, &limit, &mut diagnostics);
            let labels: Vec<std::sync::Arc<str>> =
                candidates.iter().map(|(label, _)| label.clone()).collect();
            let also = also::compile_also(source, raw_key, rule, &labels, &mut diagnostics);
            let suggest = rule.get_ref().suggest.as_ref();
            #[cfg(not(feature = "insight"))]
            for span in [
                rule.get_ref().candidates.as_ref().map(|c| c.span()),
                suggest.filter(|s| *s.get_ref()).map(|s| s.span()),
            ]
            .into_iter()
            .flatten()
            {
                diagnostics.push(source.at(
                    span,
                    format!(
                        "rule \"{}\": candidates and suggest are measured by tollgate's `insight` feature, which this build leaves out (the tollgate service has it; a library adds features = [\"insight\"])",
                        raw_key.get_ref()
                    ),
                ));
            }
            if let Some(suggest) = suggest
                && *suggest.get_ref()
                && limit.bucket_kind() == Some(Per::Global)
            {
                diagnostics.push(source.at(
                    suggest.span(),
                    format!(
                        "suggest measures each client's peak; rule \"{}\" keeps one global bucket (its candidates need no suggest)",
                        raw_key.get_ref()
                    ),
                ));
            }
            let tracks_peaks = (suggest.is_some_and(|s| *s.get_ref()) || !candidates.is_empty())
                && limit.bucket_kind() == Some(Per::Client);
            let old = previous.and_then(|set| set.get(&key));
            let inherited = old
                .filter(|old| old.limit().bucket_kind() == limit.bucket_kind())
                .map(Rule::id);
            let id = inherited.unwrap_or_else(&mut new_id);
            let origin = source.at(raw_key.span(), "");
            let mut rule = Rule::new(
                key,
                id,
                limit,
                Origin {
                    file: origin.file,
                    line: origin.line,
                },
            );
            rule.set_tracks_peaks(tracks_peaks);
            for (plan, limit) in plans {
                variants.push((rules.len(), rule.for_plan(plan, limit)));
            }
            for (label, limit) in candidates {
                // A candidate keeps its buckets across reloads as a rule does: by its
                // rule's key and its own label, while its kind of bucket stays.
                let inherited = old
                    .zip(previous)
                    .and_then(|(old, set)| set.candidate_named(old, &label))
                    .filter(|was| was.limit().bucket_kind() == limit.bucket_kind())
                    .map(Rule::id);
                let id = inherited.unwrap_or_else(&mut new_id);
                candidate_variants.push((rules.len(), rule.for_candidate(label, id, limit)));
            }
            for (entry, limit) in also {
                // An `also` limit keeps its buckets across reloads by its rule's key and
                // its name, while its kind of bucket stays.
                let inherited = old
                    .zip(previous)
                    .and_then(|(old, set)| set.also_named(old, entry.name()))
                    .filter(|was| {
                        was.limit().bucket_kind() == limit.bucket_kind()
                            && was.also().map(|a| a.by()) == Some(entry.by())
                    })
                    .map(Rule::id);
                let id = inherited.unwrap_or_else(&mut new_id);
                also_variants.push((rules.len(), rule.for_also(entry, id, limit)));
            }
            rules.push(rule);
        }
        if !diagnostics.is_empty() {
            return Err(diagnostics);
        }
        let resolvable = rules.len();
        let first_candidate = resolvable + variants.len();
        for (offset, (base, candidate)) in candidate_variants.iter().enumerate() {
            if let (Some(rule), Some(label)) = (rules.get_mut(*base), candidate.candidate()) {
                rule.add_candidate(label.into(), first_candidate + offset);
            }
        }
        let variants: Vec<Rule> = variants
            .into_iter()
            .enumerate()
            .map(|(offset, (base, mut variant))| {
                if let (Some(rule), Some(plan)) = (rules.get_mut(base), variant.plan()) {
                    rule.add_plan(plan.into(), resolvable + offset);
                    variant.share_candidates(rule.candidate_indices());
                }
                variant
            })
            .chain(
                candidate_variants
                    .into_iter()
                    .map(|(_, candidate)| candidate),
            )
            .collect();
        let first_also = resolvable + variants.len();
        for (offset, (base, _)) in also_variants.iter().enumerate() {
            if let Some(rule) = rules.get_mut(*base) {
                rule.add_also(first_also + offset);
            }
        }
        let variants: Vec<Rule> = variants
            .into_iter()
            .chain(also_variants.into_iter().map(|(_, also)| also))
            .collect();
        let mut set = RuleSet::assemble(
            rules,
            variants,
            settings,
            sources.iter().map(|s| s.path.clone()).collect(),
            next_id,
            previous.map_or(1, |set| set.generation() + 1),
        );
        set.with_rules(also::assign_stacks);
        set.extended(extensions.compile(&sources, &set)?);
        Ok(set)
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
fn parse(source: &SourceText, extensions: &Extensions) -> Result<RawFile, Vec<Diagnostic>> {
    if source.is_yaml() {
        #[cfg(feature = "yaml")]
        return super::envoy_yaml::parse(source);
        #[cfg(not(feature = "yaml"))]
        return Err(vec![source.at(
            0..0,
            "envoyproxy/ratelimit YAML config needs tollgate's `yaml` feature",
        )]);
    }
    let at_error = |error: toml::de::Error| {
        vec![source.at(error.span().unwrap_or(0..0), error.message().trim_end())]
    };
    let raw = toml::from_str::<RawFile>(&source.text).map_err(at_error)?;
    // Tables neither tollgate nor an extension knows are refused, as a misspelt field is.
    let tables = toml::from_str::<BTreeMap<Spanned<String>, de::IgnoredAny>>(&source.text)
        .map_err(at_error)?;
    let unknown: Vec<Diagnostic> = tables
        .keys()
        .filter(|name| {
            let name = name.get_ref().as_str();
            !RawFile::TABLES.contains(&name) && !extensions.tables().any(|table| table == name)
        })
        .map(|name| {
            let expected: Vec<String> = RawFile::TABLES
                .iter()
                .copied()
                .chain(extensions.tables())
                .map(|table| format!("`{table}`"))
                .collect();
            source.at(
                name.span(),
                format!(
                    "unknown field `{}`, expected one of {}",
                    name.get_ref(),
                    expected.join(", ")
                ),
            )
        })
        .collect();
    if unknown.is_empty() {
        Ok(raw)
    } else {
        Err(unknown)
    }
}

/// Compiles `text` as `limits.toml`, every problem on a line of its own: for tests.
#[cfg(test)]
pub(super) fn compile_for_test(text: &str) -> Result<RuleSet, String> {
    RuleSet::compile(
        &[SourceText::new("limits.toml", text)],
        None,
        &Extensions::default(),
    )
    .map_err(|d| {
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
    use crate::config::source::SourceText as Source;
    use crate::config::{Limit, Per};
    use crate::quota::Quota;
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
                "[key]\nparts = [\"method\", \"verb\", \"route\", \"client\"]\n",
                "limits.toml:2:20: unknown key part \"verb\"",
            ),
            (
                "[key]\nparts = [\"header:\", \"route\", \"client\"]\n",
                "limits.toml:2:10: key part \"header:\" needs a name, e.g. \"header:x-tenant\"",
            ),
            (
                "[key]\nparts = [\"route\", \"client\", \"method\"]\n",
                "limits.toml:2:9: \"client\" must be the last key part",
            ),
            (
                "[key]\nparts = [\"method\", \"route\", \"client\"]\nmax_depth = 1\n[limits]\n\"GET/a/b/c\" = \"1/s\"\n",
                "limits.toml:5:1: rule \"GET/a/b/c\" has 4 segments but routes are cut at [key] max_depth = 1 (with 1 key parts beside the route)",
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
            &Extensions::default(),
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
            &Extensions::default(),
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
            &Extensions::default(),
        )
        .unwrap();
        assert_ne!(id(&third, "c"), id(&first, "c"));
        assert_eq!(id(&third, "a"), id(&first, "a"));
    }
}
