//! Shaping through the service on real sockets: requests held (`on_limit = "delay"`) and
//! the sliding log through the proxy, the new kinds on `/config`, `/explain` and
//! `/buckets`, `TG.CHECK` waiting its turn, and the upstream timeout a hold must stay under.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use http::StatusCode;

use crate::support::{get, start_gateway};

/// Uploads at 5/s, one at once; the rest wait (up to 2 s) for their turn.
const DELAYED: &str =
    "[limits]\nupload = { rate = \"5/s\", burst = 1, on_limit = \"delay\", max_delay = \"2s\" }\n";

/// An upstream that notes when each request arrived.
async fn timed_upstream() -> (SocketAddr, Arc<Mutex<Vec<Instant>>>) {
    let arrivals = Arc::new(Mutex::new(Vec::new()));
    let noted = Arc::clone(&arrivals);
    let app = Router::new().fallback(move || {
        let noted = Arc::clone(&noted);
        async move {
            noted.lock().unwrap().push(Instant::now());
            "ok"
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (address, arrivals)
}

/// Sends `n` requests at once; each one's status, `Retry-After` and time to answer.
async fn at_once(proxy: SocketAddr, n: usize) -> Vec<(StatusCode, Option<String>, Duration)> {
    at_once_to(proxy, "/upload", n).await
}

/// The same, to `path`.
async fn at_once_to(
    proxy: SocketAddr,
    path: &'static str,
    n: usize,
) -> Vec<(StatusCode, Option<String>, Duration)> {
    let started = Instant::now();
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            tokio::spawn(async move {
                let reply = get(proxy, path, &[]).await;
                let retry = reply.header("retry-after").map(str::to_owned);
                (reply.status, retry, started.elapsed())
            })
        })
        .collect();
    let mut replies = Vec::new();
    for task in tasks {
        replies.push(task.await.unwrap());
    }
    replies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_requests_at_once_all_pass_a_fifth_of_a_second_apart() {
    let (upstream, arrivals) = timed_upstream().await;
    // A rule of its own: the metrics recorder is one per process, shared by every test.
    let config = DELAYED.replace("upload", "six");
    let running = start_gateway(&config, |o| {
        o.upstream = Some(format!("http://{upstream}").parse().unwrap())
    })
    .await;
    let replies = at_once_to(running.gateway.listen_addr(), "/six", 6).await;
    assert!(
        replies.iter().all(|(status, ..)| *status == StatusCode::OK),
        "{replies:?}"
    );
    let mut arrived = arrivals.lock().unwrap().clone();
    arrived.sort();
    let gaps: Vec<Duration> = arrived.windows(2).map(|w| w[1] - w[0]).collect();
    eprintln!("upstream saw them {gaps:?} apart");
    // Spaced at the rate: a timer never fires early, so no gap is much under 200 ms, and
    // the last arrives about a second after the first.
    assert!(
        gaps.iter().all(|gap| *gap >= Duration::from_millis(150)),
        "{gaps:?}"
    );
    let spread = arrived[5] - arrived[0];
    assert!(
        spread >= Duration::from_millis(950) && spread < Duration::from_millis(2_000),
        "{spread:?}"
    );
    // Five were held: counted, and their waits in the histogram.
    let metrics = get(running.gateway.admin_addr(), "/metrics", &[])
        .await
        .body;
    assert!(
        metrics.contains("tollgate_delayed_total{rule=\"six\"} 5"),
        "{metrics}"
    );
    assert!(
        metrics.contains("tollgate_delay_seconds_count{rule=\"six\"} 5"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_the_gateway_the_log_admits_n_again_once_the_oldest_has_left() {
    let (upstream, _) = timed_upstream().await;
    let config = "[limits]\nupload = { rate = \"2/1s\", algorithm = \"sliding-log\" }\n";
    let running = start_gateway(config, |o| {
        o.upstream = Some(format!("http://{upstream}").parse().unwrap())
    })
    .await;
    let proxy = running.gateway.listen_addr();
    let statuses = |replies: Vec<(StatusCode, Option<String>, Duration)>| -> Vec<u16> {
        replies.iter().map(|(s, ..)| s.as_u16()).collect()
    };
    let mut first = Vec::new();
    for _ in 0..3 {
        first.extend(at_once(proxy, 1).await);
    }
    assert_eq!(statuses(first.clone()), [200, 200, 429]);
    assert_eq!(first[2].1.as_deref(), Some("1"), "until the oldest leaves");
    // Once the window has passed the oldest (and the second), exactly two again.
    tokio::time::sleep(Duration::from_millis(1_050)).await;
    let mut again = Vec::new();
    for _ in 0..3 {
        again.extend(at_once(proxy, 1).await);
    }
    assert_eq!(statuses(again), [200, 200, 429]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_at_once_beyond_the_delay_budget_are_refused_immediately() {
    let (upstream, arrivals) = timed_upstream().await;
    let running = start_gateway(DELAYED, |o| {
        o.upstream = Some(format!("http://{upstream}").parse().unwrap())
    })
    .await;
    let replies = at_once(running.gateway.listen_addr(), 16).await;
    let admitted = replies
        .iter()
        .filter(|(s, ..)| *s == StatusCode::OK)
        .count();
    let refused: Vec<_> = replies
        .iter()
        .filter(|(s, ..)| *s == StatusCode::TOO_MANY_REQUESTS)
        .collect();
    eprintln!("{admitted} admitted; refusals: {refused:?}");
    // One at once and ten held (0.2 s … 2.0 s); eleven or, on a slow machine where the
    // requests arrive over more than an interval, twelve.
    assert!((11..=12).contains(&admitted), "{replies:?}");
    assert_eq!(admitted + refused.len(), 16);
    for (_, retry, took) in &refused {
        assert_eq!(
            retry.as_deref(),
            Some("1"),
            "a refusal says when to come back"
        );
        assert!(
            *took < Duration::from_millis(900),
            "refused at once, not held: {took:?}"
        );
    }
    assert_eq!(
        arrivals.lock().unwrap().len(),
        admitted,
        "a refusal reaches nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_explain_and_buckets_show_the_new_kinds() {
    let (upstream, _) = timed_upstream().await;
    let toml = format!(
        "{DELAYED}login = {{ rate = \"5/h\", algorithm = \"sliding-log\", strict = true }}\n\
         warm = {{ rate = \"100/s\", per = \"global\", warmup = \"30s\" }}\n"
    );
    let running = start_gateway(&toml, |o| {
        o.upstream = Some(format!("http://{upstream}").parse().unwrap())
    })
    .await;
    let proxy = running.gateway.listen_addr();
    let admin = running.gateway.admin_addr();
    get(proxy, "/login", &[]).await;
    get(proxy, "/upload", &[]).await;
    let json = |reply: crate::support::Reply| -> serde_json::Value {
        serde_json::from_str(&reply.body).unwrap()
    };
    let config = json(get(admin, "/config", &[]).await);
    let kinds: Vec<(String, String)> = config["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let kind = r["limit"]["kind"].as_str().unwrap().to_owned();
            (r["rule"].as_str().unwrap().to_owned(), kind)
        })
        .collect();
    assert!(
        kinds.contains(&("login".into(), "sliding-log, strict".into())),
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&("upload".into(), "gcra, delayed up to 2s".into())),
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&("warm".into(), "gcra, warm-up 30s".into())),
        "{kinds:?}"
    );
    let upload = config["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rule"] == "upload")
        .unwrap();
    assert_eq!(upload["limit"]["on_limit"], "delay");
    assert_eq!(upload["limit"]["max_delay_seconds"], 2.0);

    let why = json(get(admin, "/explain?path=/login&client=127.0.0.1", &[]).await);
    assert_eq!(why["kind"], "sliding-log, strict");
    let explained = tollgate::config::RuleSet::from_toml(&toml)
        .unwrap()
        .explain("upload", "x");
    assert_eq!(explained.kind.as_deref(), Some("gcra, delayed up to 2s"));
    assert_eq!(why["state"]["remaining"], 4, "one of five logged");

    let buckets = json(get(admin, "/buckets?prefix=login/", &[]).await);
    let row = &buckets["rows"][0];
    assert_eq!(
        (row["kind"].as_str(), row["remaining"].as_u64()),
        (Some("sliding-log, strict"), Some(4))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tg_check_answers_when_the_turn_comes() {
    let running = start_gateway(DELAYED, |o| {
        o.resp = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let address = running.gateway.resp_addr().unwrap();
    let started = Instant::now();
    let mut answered = Vec::new();
    for _ in 0..3 {
        let mut redis = redis::Client::open(format!("redis://{address}/"))
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let reply: Vec<redis::Value> = redis::cmd("TG.CHECK")
            .arg("upload/198.51.100.4")
            .query_async(&mut redis)
            .await
            .unwrap();
        assert_eq!(reply[0], redis::Value::Int(1), "admitted: {reply:?}");
        answered.push(started.elapsed());
    }
    // One at once, then one 200 ms later, then one 200 ms after that (a timer never fires
    // early; the requests were sent one after another).
    assert!(answered[1] >= Duration::from_millis(190), "{answered:?}");
    assert!(answered[2] >= Duration::from_millis(390), "{answered:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_refuses_a_max_delay_its_upstream_timeout_would_cut_short() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gateway.toml");
    std::fs::write(&file, DELAYED).unwrap();
    let mut options = crate::support::loopback_options(&file);
    options.upstream_timeout = Some(Duration::from_secs(1));
    let Err(error) = tollgate_server::Gateway::start(options).await else {
        panic!("started with max_delay 2s and an upstream timeout of 1s");
    };
    let message = error.to_string();
    assert!(
        message.contains("gateway.toml:2:1: rule \"upload\" holds requests up to max_delay 2s"),
        "{message}"
    );
}
