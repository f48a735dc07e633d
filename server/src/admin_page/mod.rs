//! The operator's page, rendered on the server with the data of the moment — the same
//! JSON the page's script fetches — so its charts and tables read without JavaScript and
//! do not jump when the script takes over and refreshes them.
//!
//! With an admin token the page is served empty: it is public, the data is not (the
//! script asks for the token and fetches it).

use std::fmt::Write as _;
use std::time::SystemTime;

use serde_json::Value;

use self::text::{ago, encode, escape, items, number, text, time_of_day};

mod text;

/// The data the page opens with: `/buckets`', `/traffic`' and `/config`'s answers.
pub(super) struct View {
    pub(super) buckets: Value,
    pub(super) traffic: Value,
    pub(super) config: Value,
    /// What filters the buckets: "under login/, at most 50% of budget left".
    pub(super) filters: String,
    /// `/suggest`'s answer for every measuring rule (at 1 %), and `/candidates`' list.
    pub(super) suggest: Value,
    pub(super) candidates: Value,
    /// `/rlqs`'s answer.
    pub(super) rlqs: Value,
}

/// `template` with its marked places filled from `view` (left empty without one).
pub(super) fn render(template: &str, view: Option<&View>) -> String {
    let Some(view) = view else {
        return template.replace("<!--summary-->", "loading…");
    };
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    template
        .replace("<!--generation-->", &generation(&view.config, now))
        .replace("<!--sampled-->", &sampled_note(&view.traffic))
        .replace("<!--charts-->", &charts(&view.traffic))
        .replace("<!--buckets-->", &bucket_rows(&view.buckets, now))
        .replace("<!--summary-->", &summary(&view.buckets, &view.filters))
        .replace("<!--reloads-->", &reloads(&view.config))
        .replace("<!--tuning-->", &tuning(&view.suggest, &view.candidates))
        .replace("<!--rlqs-->", &rlqs(&view.rlqs))
}

/// Envoy's rate limit quota service: a table of each bucket's Envoys, demand and shares,
/// or nothing when it does not serve.
fn rlqs(answer: &Value) -> String {
    if answer["enabled"] != Value::Bool(true) {
        return String::new();
    }
    let mut out = String::from(
        "<section id=\"rlqs\" aria-labelledby=\"rlqs-title\"><h2 id=\"rlqs-title\">Envoys sharing budgets (RLQS)</h2>\
         <p class=\"legend\">each bucket's rule divided among the Envoys reporting it, by demand (<a href=\"/rlqs\">/rlqs</a>; reload the page to refresh)</p>\
         <table><thead><tr><th>Bucket</th><th>Rule</th><th>This gateway's part</th><th class=\"num\">Envoy</th><th class=\"num\">Demand (req/s)</th><th class=\"num\">Share (tokens/s)</th><th class=\"num\">Burst share</th></tr></thead><tbody>",
    );
    let buckets = items(&answer["buckets"]);
    if buckets.is_empty() {
        out.push_str("<tr><td colspan=\"7\">no Envoy has reported yet</td></tr>");
    }
    for bucket in buckets {
        let key = escape(bucket["key"].as_str().unwrap_or(""));
        let rule = bucket["rule"]
            .as_str()
            .map_or_else(|| "none (allow-all)".to_owned(), escape);
        // With gateways sharing the rule through Redis, the part this one divides.
        let part = match (
            bucket["part_per_second"].as_f64(),
            bucket["gateways"].as_u64(),
        ) {
            (Some(part), Some(gateways)) => format!("{part:.1}/s, of {gateways} gateways"),
            _ => "the whole rule".to_owned(),
        };
        for envoy in items(&bucket["envoys"]) {
            let number = |value: &Value, digits: usize| {
                value
                    .as_f64()
                    .map_or_else(|| "—".to_owned(), |n| format!("{n:.digits$}"))
            };
            let _ = write!(
                out,
                "<tr><td>{key}</td><td>{rule}</td><td>{part}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                number(&envoy["stream"], 0),
                number(&envoy["demand"], 1),
                number(&envoy["tokens_per_second"], 1),
                number(&envoy["max_tokens"], 0),
            );
        }
    }
    out.push_str("</tbody></table></section>");
    out
}

fn generation(config: &Value, now: f64) -> String {
    format!(
        "generation {} · loaded {}",
        text(&config["generation"]),
        ago(number(&config["loaded_at"]), now)
    )
}

fn summary(buckets: &Value, filters: &str) -> String {
    let rows = buckets["rows"].as_array().map_or(0, Vec::len);
    let limit = buckets["limit"].as_u64().unwrap_or(0);
    let mut out = format!("{rows} bucket{}", if rows == 1 { "" } else { "s" });
    if !filters.is_empty() {
        let _ = write!(out, " {filters}");
    }
    if rows as u64 >= limit && limit > 0 {
        let _ = write!(out, " (first {limit})");
    }
    escape(&out)
}

fn bucket_rows(buckets: &Value, now: f64) -> String {
    let mut out = String::new();
    for row in buckets["rows"].as_array().into_iter().flatten() {
        let key = escape(&text(&row["key"]));
        let fraction = number(&row["fraction"]);
        let class = if fraction < 0.25 {
            "low"
        } else if fraction < 0.5 {
            "mid"
        } else {
            "high"
        };
        let _ = write!(
            out,
            "<tr data-key=\"{key}\"><td class=\"key\">{key}</td><td>{}</td><td class=\"kind\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td><span class=\"bar\"><span class=\"{class}\" style=\"width: {:.1}%;\"></span></span>{}%</td>\
             <td>{}</td><td><button class=\"forgive\" title=\"Drop this bucket: the client starts again with a full budget\">forgive</button></td></tr>",
            escape(&text(&row["rule"])),
            escape(&text(&row["kind"])),
            text(&row["remaining"]),
            text(&row["capacity"]),
            fraction * 100.0,
            (fraction * 100.0).round(),
            ago(number(&row["last_seen"]), now),
        );
    }
    out
}

/// The kinds charted, as the series name them and as the page's CSS classes do.
const LINES: [(&str, &str); 4] = [
    ("admitted", "admitted"),
    ("refused", "refused"),
    ("shadow_refused", "shadow"),
    ("delayed", "delayed"),
];

/// One small chart, drawn as the script draws it: a polyline per kind, on one scale.
fn chart(series: &[Value], label: &str) -> String {
    const WIDTH: f64 = 180.0;
    const HEIGHT: f64 = 60.0;
    let count = |slot: &Value, field: &str| number(&slot["counts"][field]);
    let top = series
        .iter()
        .flat_map(|slot| LINES.iter().map(move |(field, _)| count(slot, field)))
        .fold(1.0, f64::max);
    let step = if series.len() > 1 {
        WIDTH / (series.len() - 1) as f64
    } else {
        WIDTH
    };
    let mut svg = format!(
        "<svg viewBox=\"0 0 {WIDTH} {HEIGHT}\" preserveAspectRatio=\"none\" role=\"img\" aria-label=\"{}\">\
         <line class=\"axis\" x1=\"0\" x2=\"{WIDTH}\" y1=\"{}\" y2=\"{}\"></line>",
        escape(label),
        HEIGHT - 0.5,
        HEIGHT - 0.5
    );
    for (field, class) in LINES {
        if !series.iter().any(|slot| count(slot, field) > 0.0) {
            continue;
        }
        let points: Vec<String> = series
            .iter()
            .enumerate()
            .map(|(i, slot)| {
                let y = HEIGHT - 1.0 - count(slot, field) / top * (HEIGHT - 4.0);
                format!("{:.1},{:.1}", i as f64 * step, y)
            })
            .collect();
        let _ = write!(
            svg,
            "<polyline class=\"{class}\" points=\"{}\"></polyline>",
            points.join(" ")
        );
    }
    svg.push_str("</svg>");
    svg
}

fn totals(total: &Value) -> String {
    let mut out = format!(
        "{} admitted · {} refused",
        text(&total["admitted"]),
        text(&total["refused"])
    );
    if number(&total["shadow_refused"]) > 0.0 {
        let _ = write!(out, " · {} shadow", text(&total["shadow_refused"]));
    }
    if number(&total["delayed"]) > 0.0 {
        let _ = write!(out, " · {} delayed", text(&total["delayed"]));
    }
    out
}

/// A reserving rule's tokens: reserved at admission against what the responses used
/// (money in its currency), and the usage read by kind.
fn tokens_line(tokens: &Value) -> String {
    let mut line = match tokens["currency"].as_str() {
        Some(currency) => {
            let unit = tokens["unit_micros"].as_u64().unwrap_or(1) as f64;
            let money = |units: &Value| {
                let amount = units.as_u64().unwrap_or(0) as f64 * unit / 1_000_000.0;
                format!("{currency}{amount:.2}")
            };
            format!(
                "spent since start: {} reserved · {} used, by {} settled responses",
                money(&tokens["reserved"]),
                money(&tokens["used"]),
                text(&tokens["settlements"])
            )
        }
        None => format!(
            "tokens since start: {} reserved · {} used, by {} settled responses",
            text(&tokens["reserved"]),
            text(&tokens["used"]),
            text(&tokens["settlements"])
        ),
    };
    let kinds = ["input", "cached", "output"];
    if kinds.iter().any(|kind| number(&tokens[*kind]) > 0.0) {
        let _ = write!(
            line,
            " · usage: {} input, {} cached, {} output tokens",
            text(&tokens["input"]),
            text(&tokens["cached"]),
            text(&tokens["output"])
        );
    }
    line
}

fn figure(name: &str, total: &Value, series: &[Value], rule: Option<&Value>) -> String {
    let numbers = totals(total);
    let mut out = format!(
        "<figure class=\"chart\" data-rule=\"{}\"><figcaption><b>{}</b><span>{}</span></figcaption>{}",
        escape(name),
        escape(name),
        escape(&numbers),
        chart(series, &format!("{name}: {numbers} in the last 15 minutes"))
    );
    if let Some(tokens) = rule.map(|rule| &rule["tokens"]).filter(|t| t.is_object()) {
        let _ = write!(
            out,
            "<p class=\"tokens\">{}</p>",
            escape(&tokens_line(tokens))
        );
    }
    let top = rule
        .and_then(|rule| rule["top_refused"].as_array())
        .filter(|top| !top.is_empty());
    if let (Some(rule), Some(top)) = (rule, top) {
        out.push_str(
            "<table class=\"top\"><caption class=\"legend\">Refused most</caption><tbody>",
        );
        let path = rule["path"].as_str().unwrap_or("/");
        for heavy in top {
            let client = text(&heavy["client"]);
            let bucket = heavy["bucket"]
                .as_str()
                .map_or(client.clone(), str::to_owned);
            let error = number(&heavy["error"]);
            let count = if error > 0.0 {
                format!("{} (±{})", text(&heavy["count"]), text(&heavy["error"]))
            } else {
                text(&heavy["count"])
            };
            let _ = write!(
                out,
                "<tr data-client=\"{client_attr}\"><td class=\"key\">{client_attr}</td><td class=\"num\">{count}</td>\
                 <td><a href=\"?prefix={bucket_query}\">bucket</a> · \
                 <a href=\"/explain?path={path_query}&amp;client={client_query}\">explain</a> \
                 <button class=\"forgive\">forgive</button></td></tr>",
                client_attr = escape(&client),
                count = escape(&count),
                bucket_query = encode(&bucket),
                path_query = encode(path),
                client_query = encode(&client),
            );
        }
        out.push_str("</tbody></table>");
    }
    out.push_str("</figure>");
    out
}

/// What the page says of counts from before the history was read (the script's
/// `sampledNote`): nothing when the whole span was counted one by one.
fn sampled_note(traffic: &Value) -> String {
    let first = traffic["series"][0]["start"].as_u64().unwrap_or(0);
    let (Some(since), Some(sample), Some(refusals)) = (
        traffic["exact_since"].as_u64(),
        traffic["sample"].as_u64(),
        traffic["refusal_sample"].as_u64(),
    ) else {
        return String::new();
    };
    if since <= first {
        return String::new();
    }
    format!(
        "Counts before {} are estimates: until the history was read, one request in {sample} was counted, as {sample}, and one refusal in {refusals}, as {refusals}.",
        time_of_day(since)
    )
}

fn charts(traffic: &Value) -> String {
    let rules = items(&traffic["rules"]);
    if rules.is_empty() {
        return "<p id=\"no-traffic\">no traffic in the last 15 minutes</p>".to_owned();
    }
    let series = |value: &Value| value.as_array().map_or(Vec::new(), Clone::clone);
    let mut out = figure(
        "all rules",
        &traffic["total"],
        &series(&traffic["series"]),
        None,
    );
    for rule in rules {
        out.push_str(&figure(
            &text(&rule["rule"]),
            &rule["total"],
            &series(&rule["series"]),
            Some(rule),
        ));
    }
    out
}

/// Per rule measuring its clients' peaks: a picture of the peaks' spread on a log scale,
/// the limit in force, each candidate where it stands with what it would have refused in
/// the last hour, and the suggested limit.
fn tuning(suggest: &Value, candidates: &Value) -> String {
    let rules = items(&suggest["rules"]);
    let candidates = items(candidates);
    if rules.is_empty() && candidates.is_empty() {
        return "<p id=\"no-tuning\">no rule measures its clients' peaks: give one <code>suggest = true</code> or <code>candidates</code></p>".to_owned();
    }
    let mut out = String::new();
    for rule in rules {
        let name = text(&rule["rule"]);
        let peaks = &rule["requests"];
        let enforced = rule["rates"][0]
            .as_str()
            .and_then(|rate| rate.split_once('/'))
            .and_then(|(count, _)| count.parse::<f64>().ok());
        let mine: Vec<&Value> = candidates
            .iter()
            .filter(|c| c["rule"].as_str() == Some(name.as_str()))
            .collect();
        let window = rule["window_secs"].as_u64().unwrap_or(60);
        let unit = match window {
            1 => "second".to_owned(),
            60 => "minute".to_owned(),
            3_600 => "hour".to_owned(),
            86_400 => "day".to_owned(),
            n => format!("{n} s"),
        };
        let caption = format!(
            "peaks per {unit} of {} clients: p50 {} · p90 {} · p99 {} · p99.9 {} · max {}; refusing at most 1 %: {}",
            text(&rule["clients"]),
            text(&peaks["p50"]),
            text(&peaks["p90"]),
            text(&peaks["p99"]),
            text(&peaks["p999"]),
            text(&peaks["max"]),
            text(&rule["suggested_rate"]),
        );
        let _ = write!(
            out,
            "<figure class=\"tuning\" data-rule=\"{}\"><figcaption><b>{}</b><span>{}</span></figcaption>{}",
            escape(&name),
            escape(&name),
            escape(&caption),
            spread(peaks, enforced, &mine, &name)
        );
        out.push_str(&candidate_list(&mine));
        out.push_str("</figure>");
    }
    // Candidates of rules without peaks to draw (a global rule's).
    let drawn: Vec<String> = rules.iter().map(|rule| text(&rule["rule"])).collect();
    let rest: Vec<&Value> = candidates
        .iter()
        .filter(|c| !drawn.contains(&text(&c["rule"])))
        .collect();
    if !rest.is_empty() {
        out.push_str("<figure class=\"tuning\"><figcaption><b>other candidates</b></figcaption>");
        out.push_str(&candidate_list(&rest));
        out.push_str("</figure>");
    }
    out
}

/// The spread of clients' peaks on a log axis: a box from p50 to p90, a thinner one to
/// p99, a whisker to p99.9 and a dot at the maximum; the limit in force as a solid line,
/// each candidate as a dashed one, labelled.
fn spread(peaks: &Value, enforced: Option<f64>, candidates: &[&Value], name: &str) -> String {
    const WIDTH: f64 = 480.0;
    const HEIGHT: f64 = 64.0;
    let at = |field: &str| number(&peaks[field]).max(1.0);
    let marks: Vec<f64> = candidates
        .iter()
        .filter_map(|c| c["per_window"].as_f64())
        .chain(enforced)
        .collect();
    let top = marks.iter().copied().fold(at("max"), f64::max) * 1.2;
    let x = |value: f64| 8.0 + (value.max(1.0).ln() / top.max(2.0).ln()) * (WIDTH - 16.0);
    let mut svg = format!(
        "<svg class=\"spread\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" role=\"img\" aria-label=\"{}\">\
         <line class=\"axis\" x1=\"8\" x2=\"{}\" y1=\"40\" y2=\"40\"></line>\
         <rect class=\"p90\" x=\"{:.1}\" y=\"30\" width=\"{:.1}\" height=\"20\"></rect>\
         <rect class=\"p99\" x=\"{:.1}\" y=\"34\" width=\"{:.1}\" height=\"12\"></rect>\
         <line class=\"whisker\" x1=\"{:.1}\" x2=\"{:.1}\" y1=\"40\" y2=\"40\"></line>\
         <circle class=\"max\" cx=\"{:.1}\" cy=\"40\" r=\"3\"></circle>",
        escape(&format!(
            "{name}: clients' peaks from p50 {} to max {}",
            at("p50"),
            at("max")
        )),
        WIDTH - 8.0,
        x(at("p50")),
        (x(at("p90")) - x(at("p50"))).max(1.0),
        x(at("p90")),
        (x(at("p99")) - x(at("p90"))).max(1.0),
        x(at("p99")),
        x(at("p999")),
        x(at("max")),
    );
    // Powers of ten along the axis, faint, so the log scale reads.
    let mut tick = 1.0;
    while tick <= top {
        let _ = write!(
            svg,
            "<line class=\"tick\" x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"36\" y2=\"44\"></line>\
             <text class=\"tick\" x=\"{0:.1}\" y=\"28\">{1}</text>",
            x(tick),
            tick
        );
        tick *= 10.0;
    }
    if let Some(limit) = enforced {
        let _ = write!(
            svg,
            "<line class=\"limit\" x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"12\" y2=\"58\"></line>\
             <text x=\"{0:.1}\" y=\"10\">limit {1}</text>",
            x(limit),
            limit
        );
    }
    for (row, candidate) in candidates.iter().enumerate() {
        let Some(value) = candidate["per_window"].as_f64() else {
            continue;
        };
        let _ = write!(
            svg,
            "<line class=\"candidate\" x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"20\" y2=\"58\"></line>\
             <text class=\"candidate\" x=\"{0:.1}\" y=\"{1}\">{2}</text>",
            x(value),
            62 - (row % 2) * 4,
            escape(&text(&candidate["candidate"]))
        );
    }
    svg.push_str("</svg>");
    svg
}

/// Each candidate's would-refuse figures over the last hour.
fn candidate_list(candidates: &[&Value]) -> String {
    if candidates.is_empty() {
        return String::new();
    }
    let mut out = String::from("<ul class=\"candidates\">");
    for candidate in candidates {
        let hour = candidate["windows"]
            .as_array()
            .and_then(|windows| windows.iter().find(|w| w["window"] == "1h"));
        let Some(hour) = hour else { continue };
        let requests = number(&hour["requests"]);
        let refused = number(&hour["would_refuse"]);
        let share = if requests > 0.0 {
            refused / requests * 100.0
        } else {
            0.0
        };
        let _ = write!(
            out,
            "<li data-candidate=\"{label}\"><b>{label}</b> would have refused {refused} of {requests} requests ({share:.1} %) from {clients} clients in the last hour</li>",
            label = escape(&text(&candidate["candidate"])),
            refused = refused,
            requests = requests,
            clients = text(&hour["clients"]),
        );
    }
    out.push_str("</ul>");
    out
}

fn reloads(config: &Value) -> String {
    let reloads = items(&config["reloads"]);
    if reloads.is_empty() {
        return "<li id=\"no-reloads\">no reload since start</li>".to_owned();
    }
    let mut out = String::new();
    for reload in reloads {
        let applied = reload["applied"].as_bool().unwrap_or(false);
        let changes = items(&reload["changes"]);
        let seconds = reload["at"].as_f64().unwrap_or(0.0) as u64;
        let when = time_of_day(seconds);
        let outcome = match (applied, changes.is_empty()) {
            (false, _) => " · refused, previous rules kept",
            (true, true) => " · no rule changed",
            (true, false) => "",
        };
        let sources: Vec<String> = reload["sources"]
            .as_array()
            .map_or(Vec::new(), |sources| sources.iter().map(text).collect());
        let trigger = if sources.is_empty() {
            text(&reload["trigger"])
        } else {
            format!("{} {}", text(&reload["trigger"]), sources.join(", "))
        };
        let _ = write!(
            out,
            "<li class=\"{}\">{} · {} · generation {}{}",
            if applied { "applied" } else { "failed" },
            when,
            escape(&trigger),
            text(&reload["generation"]),
            outcome
        );
        if !applied {
            let _ = write!(
                out,
                "<span class=\"change\">{}</span>",
                escape(&text(&reload["error"]))
            );
        }
        for change in changes {
            let (rule, before, after) = (
                text(&change["rule"]),
                text(&change["before"]),
                text(&change["after"]),
            );
            let line = match (change["before"].is_null(), change["after"].is_null()) {
                (true, _) => format!("+ {rule}: {after}"),
                (_, true) => format!("− {rule}: {before}"),
                _ => format!("~ {rule}: {before} → {after}"),
            };
            let _ = write!(out, "<span class=\"change\">{}</span>", escape(&line));
        }
        out.push_str("</li>");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn what_clients_send_is_escaped_wherever_it_lands() {
        let hostile = "<script>alert(1)</script>\"'&";
        let view = View {
            buckets: json!({ "limit": 100, "rows": [{
                "key": format!("login/{hostile}"), "rule": "login", "kind": "gcra",
                "remaining": 0, "capacity": 5, "fraction": 0.0, "last_seen": 0.0
            }]}),
            traffic: json!({ "total": { "admitted": 1, "refused": 1, "shadow_refused": 0, "delayed": 0 },
                "series": [], "rules": [{ "rule": "login", "path": "/login",
                "total": { "admitted": 1, "refused": 1, "shadow_refused": 0, "delayed": 0 },
                "series": [{ "start": 0, "counts": { "admitted": 1, "refused": 1, "shadow_refused": 0, "delayed": 0 } }],
                "top_refused": [{ "client": hostile, "bucket": format!("login/{hostile}"), "count": 1, "error": 0 }] }] }),
            config: json!({ "generation": 2, "loaded_at": 0, "reloads": [{
                "at": 0, "trigger": "file", "generation": 2, "applied": false,
                "error": hostile, "changes": [] }] }),
            filters: format!("under {hostile}"),
            suggest: json!({ "rules": [{ "rule": hostile, "rates": ["10/min"], "window_secs": 60,
                "clients": 3, "suggested_rate": "5/min",
                "requests": { "p50": 1, "p90": 2, "p99": 3, "p999": 4, "max": 9 } }] }),
            candidates: json!([{ "rule": hostile, "candidate": hostile, "per_window": 3.0,
                "windows": [{ "window": "1h", "requests": 4, "would_refuse": 1, "clients": 1 }] }]),
            rlqs: json!({ "enabled": true, "buckets": [{ "key": hostile, "rule": null,
                "gateways": 2, "part_per_second": 80.5,
                "envoys": [{ "stream": 1, "demand": 12.5, "tokens_per_second": 80.0, "max_tokens": 16 }] }] }),
        };
        let page = render(
            "<!--generation--><!--charts--><!--buckets--><!--summary--><!--reloads--><!--tuning--><!--rlqs-->",
            Some(&view),
        );
        assert!(!page.contains("<script>"), "{page}");
        assert!(!page.contains("\"'&<"), "{page}");
        assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#39;&amp;"));
        assert!(
            page.contains("?prefix=login%2F%3Cscript%3E"),
            "links are encoded: {page}"
        );
        assert!(
            page.contains("<polyline class=\"refused\""),
            "the chart is drawn: {page}"
        );
        assert!(
            page.contains("<td>none (allow-all)</td><td>80.5/s, of 2 gateways</td><td class=\"num\">1</td><td class=\"num\">12.5</td><td class=\"num\">80.0</td><td class=\"num\">16</td>"),
            "the RLQS table: {page}"
        );
        let off = View {
            rlqs: json!({ "enabled": false, "buckets": [] }),
            ..view
        };
        assert!(
            !render("<!--rlqs-->", Some(&off)).contains("RLQS"),
            "no section while RLQS is off"
        );
    }

    #[test]
    fn the_page_says_which_counts_were_sampled() {
        let traffic = |since: u64| {
            json!({ "exact_since": since, "sample": 64, "refusal_sample": 8,
                    "series": [{ "start": 3_600, "counts": {} }, { "start": 3_605, "counts": {} }] })
        };
        assert_eq!(
            sampled_note(&traffic(3_605)),
            "Counts before 01:00:05 UTC are estimates: until the history was read, one request in 64 was counted, as 64, and one refusal in 8, as 8."
        );
        assert_eq!(sampled_note(&traffic(3_600)), "", "the whole span exact");
    }

    #[test]
    fn without_a_view_the_page_is_served_empty() {
        let page = render(
            "<tbody><!--buckets--></tbody><div id=\"summary\"><!--summary--></div>",
            None,
        );
        assert_eq!(
            page,
            "<tbody><!--buckets--></tbody><div id=\"summary\">loading…</div>"
        );
    }
}
