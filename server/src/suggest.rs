//! `tollgate suggest`: asks a running admin listener which limits its clients' peaks
//! suggest (`GET /suggest`), and prints them as a unified diff of the config files that
//! hold the rules, ready for `patch` — each rule's first rate replaced, the file's
//! comments and layout kept. A file under the current directory is named from it
//! (`patch -p0`); another by its absolute path without the leading `/` (`patch -p0 -d /`);
//! a comment above each file's diff says which. A file that cannot be read here (the listener is on another
//! host) is printed as the rules to write instead.
//!
//! ```sh
//! tollgate suggest --admin http://127.0.0.1:9090 --refuse 1 > limits.diff
//! patch -p0 < limits.diff
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;

use http_body_util::BodyExt as _;
use serde::Deserialize;

/// `tollgate suggest`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct SuggestArgs {
    /// The admin listener to ask (plain HTTP).
    #[arg(long, default_value = "http://127.0.0.1:9090")]
    pub admin: String,
    /// The share of clients the suggested limits may refuse, in per cent.
    #[arg(long, default_value_t = 1.0)]
    pub refuse: f64,
    /// Only this rule (its name; `/` for the root rule). Every measuring rule without it.
    #[arg(long)]
    pub rule: Option<String>,
    /// The admin token, if the listener has one (or TOLLGATE_ADMIN_TOKEN).
    #[arg(long, env = "TOLLGATE_ADMIN_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Edit this file instead of the one the listener names (the same config mounted
    /// elsewhere here).
    #[arg(long)]
    pub config: Option<PathBuf>,
}

/// Why no diff was printed.
#[derive(Debug, thiserror::Error)]
pub enum SuggestError {
    /// The listener could not be asked.
    #[error("cannot ask {admin}: {reason}")]
    Unreachable {
        /// The listener.
        admin: String,
        /// What went wrong.
        reason: String,
    },
    /// The listener answered with an error.
    #[error("{admin} answered {status}: {body}")]
    Refused {
        /// The listener.
        admin: String,
        /// Its status.
        status: u16,
        /// What it said.
        body: String,
    },
}

#[derive(Debug, Deserialize)]
struct Answer {
    refuse_percent: f64,
    rules: Vec<RuleSuggestion>,
}

#[derive(Debug, Deserialize)]
struct RuleSuggestion {
    rule: String,
    key: String,
    file: String,
    line: usize,
    rates: Vec<String>,
    suggested_rate: String,
    clients: u64,
}

/// Asks `args.admin` and returns the diff (or the rules to write) to print.
pub async fn run(args: &SuggestArgs) -> Result<String, SuggestError> {
    let answer = ask(args).await?;
    Ok(render(&answer, args.config.as_deref()))
}

async fn ask(args: &SuggestArgs) -> Result<Answer, SuggestError> {
    let unreachable = |reason: String| SuggestError::Unreachable {
        admin: args.admin.clone(),
        reason,
    };
    let mut query = form_urlencoded::Serializer::new(String::new());
    query.append_pair("refuse", &args.refuse.to_string());
    if let Some(rule) = &args.rule {
        query.append_pair("rule", rule);
    }
    let uri: http::Uri = format!(
        "{}/suggest?{}",
        args.admin.trim_end_matches('/'),
        query.finish()
    )
    .parse()
    .map_err(|error| unreachable(format!("not a URL: {error}")))?;
    if uri.scheme_str() != Some("http") {
        return Err(unreachable(
            "tollgate suggest speaks plain HTTP to the admin listener (for HTTPS, fetch /suggest with curl)".to_owned(),
        ));
    }
    let mut request = http::Request::get(uri);
    if let Some(token) = &args.token {
        request = request.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let request = request
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .map_err(|error| unreachable(error.to_string()))?;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http();
    let response =
        tokio::time::timeout(std::time::Duration::from_secs(30), client.request(request))
            .await
            .map_err(|_| unreachable("no answer in 30 s".to_owned()))?
            .map_err(|error| unreachable(error.to_string()))?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|error| unreachable(error.to_string()))?
        .to_bytes();
    if !status.is_success() {
        return Err(SuggestError::Refused {
            admin: args.admin.clone(),
            status: status.as_u16(),
            body: String::from_utf8_lossy(&body).trim().to_owned(),
        });
    }
    serde_json::from_slice(&body)
        .map_err(|error| unreachable(format!("unreadable answer: {error}")))
}

/// The diff of every file a suggestion touches, or the rules to write for files not
/// readable here.
fn render(answer: &Answer, config: Option<&std::path::Path>) -> String {
    let mut by_file: BTreeMap<String, Vec<&RuleSuggestion>> = BTreeMap::new();
    for rule in &answer.rules {
        let file = config.map_or(rule.file.clone(), |path| path.display().to_string());
        by_file.entry(file).or_default().push(rule);
    }
    let mut out = String::new();
    if answer.rules.is_empty() {
        out.push_str(
            "# no rule measures its clients' peaks: give one `suggest = true` or `candidates`\n",
        );
    }
    for (file, rules) in by_file {
        let edited = std::fs::read_to_string(&file)
            .ok()
            .and_then(|text| edit(&text, &rules).map(|edited| (text, edited)));
        match edited {
            Some((before, after)) if before != after => {
                // patch refuses absolute names: a file under this directory is named from
                // here (`patch -p0`), another by its absolute path less the `/`
                // (`patch -p0 -d /`).
                let here = std::env::current_dir().ok();
                let path = std::path::Path::new(&file);
                let (name, how) = match here
                    .as_deref()
                    .and_then(|here| path.strip_prefix(here).ok())
                {
                    Some(relative) => (relative.display().to_string(), "patch -p0"),
                    None if path.is_absolute() => {
                        (file.trim_start_matches('/').to_owned(), "patch -p0 -d /")
                    }
                    None => (file.clone(), "patch -p0"),
                };
                out.push_str(&format!(
                    "# {} rule(s) of {file}, refusing at most {} % of clients; apply with: {how}\n",
                    rules.len(),
                    answer.refuse_percent
                ));
                let diff = similar::TextDiff::from_lines(&before, &after);
                out.push_str(
                    &diff
                        .unified_diff()
                        .context_radius(2)
                        .header(&name, &name)
                        .to_string(),
                );
            }
            Some(_) => {
                for rule in rules {
                    out.push_str(&format!(
                        "# {file}:{}: rule \"{}\" already has the suggested rate {}\n",
                        rule.line, rule.rule, rule.suggested_rate
                    ));
                }
            }
            None => {
                out.push_str(&format!(
                    "# {file} cannot be read or edited here; the suggested rules (refusing at most {} % of clients):\n[limits]\n",
                    answer.refuse_percent
                ));
                for rule in rules {
                    out.push_str(&format!(
                        "# line {}, now {:?}, from {} clients\n{} = {:?}\n",
                        rule.line,
                        rule.rates,
                        rule.clients,
                        toml_edit::Key::new(rule.key.as_str()),
                        rule.suggested_rate
                    ));
                }
            }
        }
    }
    out
}

/// `text` with each rule's first rate replaced by its suggestion; `None` when the text is
/// not TOML this can edit.
fn edit(text: &str, rules: &[&RuleSuggestion]) -> Option<String> {
    let mut document: toml_edit::DocumentMut = text.parse().ok()?;
    let limits = document.get_mut("limits")?.as_table_like_mut()?;
    for rule in rules {
        let written: Option<String> = limits
            .iter()
            .map(|(key, _)| key.to_owned())
            .find(|key| same_key(key, &rule.key));
        let Some(written) = written else {
            continue;
        };
        let Some(item) = limits.get_mut(&written) else {
            continue;
        };
        set_rate(item, &rule.suggested_rate);
    }
    Some(document.to_string())
}

/// Whether a key as written in `[limits]` is the rule's normalised key.
fn same_key(written: &str, key: &str) -> bool {
    let normal: Vec<&str> = written
        .split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .collect();
    normal.join("/") == key || normal.join("/").eq_ignore_ascii_case(key)
}

/// Replaces the first rate of a rule written as a string, an inline table or a table.
fn set_rate(item: &mut toml_edit::Item, rate: &str) {
    let replace = |value: &mut toml_edit::Value| {
        let decor = value.decor().clone();
        *value = toml_edit::Value::from(rate);
        *value.decor_mut() = decor;
    };
    if let Some(value) = item.as_value_mut()
        && value.is_str()
    {
        replace(value);
        return;
    }
    let Some(table) = item.as_table_like_mut() else {
        return;
    };
    let Some(field) = table.get_mut("rate") else {
        return;
    };
    let Some(value) = field.as_value_mut() else {
        return;
    };
    if value.is_str() {
        replace(value);
    } else if let Some(first) = value.as_array_mut().and_then(|rates| rates.get_mut(0)) {
        replace(first);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn suggestion(key: &str, rate: &str) -> RuleSuggestion {
        RuleSuggestion {
            rule: if key.is_empty() {
                "/".into()
            } else {
                key.into()
            },
            key: key.into(),
            file: "limits.toml".into(),
            line: 1,
            rates: vec!["100/min".into()],
            suggested_rate: rate.into(),
            clients: 10,
        }
    }

    #[test]
    fn each_form_of_rule_is_edited_in_place_and_comments_stay() {
        let text = "# our limits\n[limits]\n\"/\" = \"20/s\" # everyone\n\
                    \"/api/search\" = { rate = \"100/min\", suggest = true }\n\
                    [limits.login]\nrate = [\"5/min\", \"50/day\"] # two\n";
        let rules = [
            suggestion("", "7/s"),
            suggestion("api/search", "41/min"),
            suggestion("login", "3/min"),
        ];
        let refs: Vec<&RuleSuggestion> = rules.iter().collect();
        let edited = edit(text, &refs).unwrap();
        assert_eq!(
            edited,
            "# our limits\n[limits]\n\"/\" = \"7/s\" # everyone\n\
             \"/api/search\" = { rate = \"41/min\", suggest = true }\n\
             [limits.login]\nrate = [\"3/min\", \"50/day\"] # two\n"
        );
    }

    #[test]
    fn a_file_not_readable_here_is_printed_as_rules_to_write() {
        let answer = Answer {
            refuse_percent: 1.0,
            rules: vec![RuleSuggestion {
                file: "/nowhere/limits.toml".into(),
                ..suggestion("api/search", "41/min")
            }],
        };
        let out = render(&answer, None);
        assert!(out.contains("cannot be read or edited here"), "{out}");
        assert!(out.contains("\"api/search\" = \"41/min\""), "{out}");
    }

    #[test]
    fn a_readable_file_becomes_a_unified_diff() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("limits.toml");
        std::fs::write(&file, "[limits]\napi = \"100/min\"\n").unwrap();
        let answer = Answer {
            refuse_percent: 1.0,
            rules: vec![RuleSuggestion {
                file: file.display().to_string(),
                ..suggestion("api", "41/min")
            }],
        };
        let out = render(&answer, None);
        assert!(
            out.contains("-api = \"100/min\"\n+api = \"41/min\"\n"),
            "{out}"
        );
        let name = file.display().to_string();
        assert!(
            out.contains(&format!("--- {}", name.trim_start_matches('/'))),
            "{out}"
        );
    }
}
