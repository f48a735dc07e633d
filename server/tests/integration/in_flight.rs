//! Concurrency caps through the service: the adaptive limit in front of an overloaded
//! upstream, on real sockets.

use std::time::Duration;

use http::StatusCode;

use crate::support::upstream;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adaptive_cap_in_front_of_an_overloaded_upstream_keeps_latency_and_goodput() {
    let (workers, service) = (4, Duration::from_millis(50));
    let address = upstream::queueing(workers, service).await;
    let running =
        crate::support::start_gateway("[limits]\n\"/\" = { concurrency = \"adaptive\" }\n", |o| {
            o.upstream = Some(format!("http://{address}").parse().unwrap())
        })
        .await;
    let proxy = running.gateway.listen_addr();
    // Open loop at three times the upstream's capacity (80/s), from the first moment.
    let results = upstream::open_loop(proxy, 240, Duration::from_secs(6)).await;
    // Judged once the limit has found the upstream (after the first probe and descent).
    let from = Duration::from_millis(2_500);
    let window = 3.5;
    let settled = results.iter().filter(|sent| sent.at >= from).count();
    let mut admitted = upstream::latencies(&results, from, StatusCode::OK);
    let mut refused = upstream::latencies(&results, from, StatusCode::TOO_MANY_REQUESTS);
    let goodput = admitted.len() as f64 / window;
    let p90 = upstream::quantile(&mut admitted, 0.9);
    let refused_p90 = upstream::quantile(&mut refused, 0.9);
    let admin = running.gateway.admin_addr();
    let config: serde_json::Value =
        serde_json::from_str(&crate::support::get(admin, "/config", &[]).await.body).unwrap();
    eprintln!(
        "goodput {goodput:.0}/s of 80/s, admitted p90 {p90:?}, refused p90 {refused_p90:?}, {} refused; cap {}",
        refused.len(),
        config["concurrency"][0]
    );
    assert!(goodput >= 0.75 * 80.0, "goodput {goodput:.0}/s");
    assert!(
        p90 <= 4 * service,
        "admitted p90 {p90:?} for a 50 ms upstream"
    );
    assert!(
        refused.len() as f64 >= 0.4 * settled as f64,
        "the excess is refused"
    );
    assert!(
        refused_p90 < service,
        "refused at once, not queued: {refused_p90:?}"
    );
    let baseline = config["concurrency"][0]["baseline_ms"]
        .as_f64()
        .unwrap_or(0.0);
    assert!(
        (45.0..=65.0).contains(&baseline),
        "no-load latency {baseline} ms"
    );
    let metrics = crate::support::get(admin, "/metrics", &[]).await.body;
    assert!(
        metrics.contains("tollgate_concurrency_limit{rule=\"/\"}"),
        "{metrics}"
    );
    assert!(metrics.contains("tollgate_concurrency_refused_total{rule=\"/\"}"));
    assert!(metrics.contains("tollgate_in_flight{rule=\"/\"}"));
}
