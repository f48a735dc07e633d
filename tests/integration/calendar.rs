//! Calendar quotas through the fake clock: windows that end at local midnight, on the
//! first of the month and on Monday, across month ends, leap days and both daylight-saving
//! changes in Europe and the US; the headers name the true reset.

use std::time::Duration;

use axum::Router;
use axum::routing::get;
use http::StatusCode;
use tollgate::clock::FakeClock;
use tollgate::key::PeerAddr;
use tollgate::{Limits, RateLimitLayer};
use tower::ServiceExt as _;

use crate::support::now_or_never;

/// A limiter of one rule, and its clock moved `seconds` past 2026-01-01T00:00:00Z.
fn at(rule: &str, seconds: u64) -> (Limits, FakeClock) {
    let clock = FakeClock::new();
    clock.advance(Duration::from_secs(seconds));
    let limits = Limits::builder()
        .clock(clock.clone())
        .from_toml(&format!("[limits]\napi = {rule}\n"))
        .unwrap();
    (limits, clock)
}

/// Spends the whole budget; returns the refusal's retry-after and reset, in seconds.
fn exhaust(limits: &Limits, count: u32) -> (u64, u64) {
    for n in 0..count {
        let decision = now_or_never(limits.check("api/c", 1)).unwrap();
        assert!(decision.allowed(), "request {n} of {count}");
    }
    let refused = now_or_never(limits.check("api/c", 1)).unwrap();
    assert!(!refused.allowed());
    (refused.retry_after().as_secs(), refused.reset().as_secs())
}

fn allowed(limits: &Limits) -> bool {
    now_or_never(limits.check("api/c", 1)).unwrap().allowed()
}

#[test]
fn a_month_ends_at_local_midnight_on_the_first() {
    // 2026-01-31 23:59 in Berlin (22:59 UTC): one minute of January left.
    let (limits, clock) = at(
        "{ rate = \"3/month\", calendar = \"Europe/Berlin\" }",
        2_674_740,
    );
    assert_eq!(exhaust(&limits, 3), (60, 60));
    clock.advance(Duration::from_secs(59));
    assert!(!allowed(&limits), "still January in Berlin");
    clock.advance(Duration::from_secs(1));
    assert!(allowed(&limits), "February: a new month's budget");
}

#[test]
fn a_leap_day_is_a_day_and_february_ends_after_it() {
    // 2028-02-28 23:30 in New York (2028-02-29 04:30 UTC).
    let day = "{ rate = \"2/day\", calendar = \"America/New_York\" }";
    let (limits, clock) = at(day, 68_185_800);
    assert_eq!(exhaust(&limits, 2), (1_800, 1_800));
    clock.advance(Duration::from_secs(1_800));
    assert!(allowed(&limits), "29 February has a budget of its own");
    // The month rule, at the same instant: February ends a day and a half later.
    let month = "{ rate = \"2/month\", calendar = \"America/New_York\" }";
    let (limits, _) = at(month, 68_185_800);
    assert_eq!(exhaust(&limits, 2).1, 1_800 + 86_400);
}

#[test]
fn days_are_23_and_25_hours_long_when_the_clocks_change() {
    for (zone, spring, autumn) in [
        // 00:30 local on the change's day: 2026-03-29 and 2026-10-25 in Berlin.
        ("Europe/Berlin", 7_515_000, 25_655_400),
        // 2026-03-08 and 2026-11-01 in New York.
        ("America/New_York", 5_722_200, 26_281_800),
    ] {
        let rule = format!("{{ rate = \"1/day\", calendar = \"{zone}\" }}");
        let (limits, _) = at(&rule, spring);
        assert_eq!(exhaust(&limits, 1).1, 22 * 3_600 + 1_800, "{zone}: spring");
        let (limits, clock) = at(&rule, autumn);
        assert_eq!(exhaust(&limits, 1).1, 24 * 3_600 + 1_800, "{zone}: autumn");
        clock.advance(Duration::from_secs(24 * 3_600 + 1_799));
        assert!(!allowed(&limits), "{zone}: the long day is not over");
        clock.advance(Duration::from_secs(1));
        assert!(allowed(&limits), "{zone}: the next day");
    }
}

#[test]
fn a_week_runs_from_monday() {
    // Monday 2026-01-05 10:00 UTC (11:00 in Berlin): the week ends at the next Monday.
    let (limits, _) = at(
        "{ rate = \"1/week\", calendar = \"Europe/Berlin\" }",
        381_600,
    );
    assert_eq!(exhaust(&limits, 1).1, 7 * 86_400 - 11 * 3_600);
}

#[tokio::test]
async fn the_headers_name_the_true_reset() {
    let (limits, _) = at(
        "{ rate = \"1/month\", calendar = \"Europe/Berlin\" }",
        2_674_740,
    );
    let app = Router::new()
        .route("/api", get(|| async { "ok" }))
        .layer(RateLimitLayer::new(limits));
    let request = || {
        let mut request = http::Request::get("/api")
            .body(axum::body::Body::empty())
            .unwrap();
        request
            .extensions_mut()
            .insert(PeerAddr("192.0.2.1:1".parse().unwrap()));
        request
    };
    let first = app.clone().oneshot(request()).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let refused = app.oneshot(request()).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers()["retry-after"], "60");
    let ratelimit = refused.headers()["ratelimit"].to_str().unwrap();
    assert!(
        ratelimit.contains("r=0") && ratelimit.contains("t=60"),
        "{ratelimit}"
    );
}

#[test]
fn calendar_mistakes_are_refused_where_written() {
    let error = |rule: &str| {
        Limits::from_toml(&format!("[limits]\napi = {rule}\n"))
            .unwrap_err()
            .to_string()
    };
    let unknown = error("{ rate = \"5/day\", calendar = \"Mars/Olympus\" }");
    assert!(
        unknown.contains("<inline>:2:36") && unknown.contains("Mars/Olympus"),
        "{unknown}"
    );
    let gcra = error("{ rate = \"5/day\", calendar = \"UTC\", algorithm = \"gcra\" }");
    assert!(gcra.contains("fixed windows"), "{gcra}");
    let odd = error("{ rate = \"5/2d\", calendar = \"UTC\" }");
    assert!(odd.contains("\"day\", \"week\" or \"month\""), "{odd}");
}
