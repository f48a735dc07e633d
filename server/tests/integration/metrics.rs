//! What the library counts, as the service's Prometheus page shows it.

use axum::Router;
use axum::routing::get;
use http::StatusCode;
use tollgate::clock::FakeClock;
use tollgate::{Limits, RateLimitLayer};

use crate::support::{get as fetch, serve};

#[tokio::test]
async fn shadow_rules_never_refuse_and_show_nothing_but_count() {
    let metrics = tollgate_server::metrics::install();
    let clock = FakeClock::new();
    let limits = limiter(
        "[limits]\n\"shadow-probe\" = { rate = \"1/min\", shadow = true }\n",
        &clock,
    );
    let app = Router::new()
        .route("/shadow-probe", get(|| async { "ok" }))
        .layer(RateLimitLayer::new(limits));
    let address = serve(app).await;
    for _ in 0..5 {
        let reply = fetch(address, "/shadow-probe", &[]).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert!(
            !reply.headers.keys().any(|name| name.contains("ratelimit")),
            "{reply:?}"
        );
    }
    let rendered = metrics.render();
    let count = |outcome: &str| {
        rendered
            .lines()
            .find_map(|l| {
                l.strip_prefix(&format!(
                    "tollgate_requests_total{{rule=\"shadow-probe\",outcome=\"{outcome}\"}} "
                ))
            })
            .and_then(|v| v.parse::<u64>().ok())
    };
    assert_eq!(count("allowed"), Some(1));
    assert_eq!(count("shadow_limited"), Some(4), "{rendered}");
}

fn limiter(config: &str, clock: &FakeClock) -> Limits {
    Limits::builder()
        .clock(clock.clone())
        .from_toml(config)
        .unwrap()
}
