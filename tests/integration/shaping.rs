//! Shaping (issue 21): requests held instead of refused (`on_limit = "delay"`), the exact
//! sliding log, and warm-up — through the layer and the API. (Through the service on real
//! sockets: the service's `shaping` tests.)

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use tollgate::clock::FakeClock;
use tollgate::key::PeerAddr;
use tollgate::{Limits, RateLimitLayer};
use tower::{Service, ServiceExt};

const DELAYED: &str =
    "[limits]\nupload = { rate = \"5/s\", burst = 1, on_limit = \"delay\", max_delay = \"2s\" }\n";

/// A layer over a service that counts its calls, deciding on `clock`.
struct Counted<S> {
    service: S,
    calls: Arc<Mutex<usize>>,
    limits: Limits,
}

fn counted_layer(
    toml: &str,
    clock: &FakeClock,
) -> Counted<
    impl Service<
        Request<()>,
        Response = Response<tollgate::body::ResponseBody<String>>,
        Error = Infallible,
        Future: Send,
    > + Clone
    + use<>,
> {
    let limits = Limits::builder()
        .clock(clock.clone())
        .from_toml(toml)
        .unwrap();
    let calls = Arc::new(Mutex::new(0));
    let counted = Arc::clone(&calls);
    let inner = tower::service_fn(move |_: Request<()>| {
        *counted.lock().unwrap() += 1;
        async { Ok::<_, Infallible>(Response::new(String::from("ok"))) }
    });
    let service = tower::ServiceBuilder::new()
        .layer(RateLimitLayer::new(limits.clone()))
        .service(inner);
    Counted {
        service,
        calls,
        limits,
    }
}

fn request() -> Request<()> {
    let mut request = Request::get("/upload").body(()).unwrap();
    request
        .extensions_mut()
        .insert(PeerAddr("192.0.2.9:1".parse().unwrap()));
    request
}

#[tokio::test(start_paused = true)]
async fn a_client_that_leaves_while_held_never_reaches_the_service_and_gives_nothing_back() {
    let clock = FakeClock::new();
    let Counted {
        service,
        calls,
        limits,
    } = counted_layer(DELAYED, &clock);
    assert_eq!(
        service.clone().oneshot(request()).await.unwrap().status(),
        StatusCode::OK
    );
    // The second is held for 200 ms; its client goes away after 50.
    let mut held = Box::pin(service.clone().oneshot(request()));
    assert!(
        tokio::time::timeout(Duration::from_millis(50), &mut held)
            .await
            .is_err()
    );
    drop(held);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        *calls.lock().unwrap(),
        1,
        "the held request was never passed on"
    );
    // Its place was taken when it was decided: the next one waits behind it.
    let next = limits.check("upload/192.0.2.9", 1).await.unwrap();
    assert!(next.allowed());
    assert_eq!(next.delay(), Duration::from_millis(400));
}

#[tokio::test(start_paused = true)]
async fn the_layer_holds_then_passes_and_the_response_carries_the_headers() {
    let clock = FakeClock::new();
    let Counted { service, calls, .. } = counted_layer(DELAYED, &clock);
    let started = tokio::time::Instant::now();
    let tasks: Vec<_> = (0..3)
        .map(|_| tokio::spawn(service.clone().oneshot(request())))
        .collect();
    let mut replies = Vec::new();
    for task in tasks {
        replies.push(task.await.unwrap().unwrap());
    }
    assert_eq!(
        started.elapsed(),
        Duration::from_millis(400),
        "the last waited 2 intervals"
    );
    for reply in &replies {
        assert_eq!(reply.status(), StatusCode::OK);
        assert!(reply.headers().contains_key("ratelimit"));
    }
    assert_eq!(*calls.lock().unwrap(), 3);
}

#[tokio::test]
async fn the_sliding_log_admits_n_again_only_once_the_oldest_has_left() {
    let clock = FakeClock::new();
    let limits = Limits::builder()
        .clock(clock.clone())
        .from_toml("[limits]\nlogin = { rate = \"5/h\", algorithm = \"sliding-log\" }\n")
        .unwrap();
    for _ in 0..3 {
        assert!(limits.check("login/a", 1).await.unwrap().allowed());
    }
    clock.advance(Duration::from_secs(600));
    for _ in 0..2 {
        assert!(limits.check("login/a", 1).await.unwrap().allowed());
    }
    let refused = limits.check("login/a", 1).await.unwrap();
    assert!(!refused.allowed());
    // The three oldest (at 0) leave at one hour: 50 minutes from now.
    assert_eq!(refused.retry_after_secs(), 3000);
    clock.advance(Duration::from_secs(3000) - Duration::from_nanos(1));
    assert!(!limits.check("login/a", 1).await.unwrap().allowed());
    clock.advance(Duration::from_nanos(1));
    // Exactly three again (the two at 10 minutes are still inside), not five.
    let mut again = Vec::new();
    for _ in 0..5 {
        again.push(limits.check("login/a", 1).await.unwrap().allowed());
    }
    assert_eq!(again, [true, true, true, false, false]);
}

#[tokio::test]
async fn warm_up_starts_a_cold_global_bucket_at_a_third_of_the_rate() {
    let clock = FakeClock::new();
    let limits = Limits::builder()
        .clock(clock.clone())
        .from_toml(
            "[limits]\nupstream = { rate = \"10/s\", burst = 1, per = \"global\", warmup = \"10s\" }\n",
        )
        .unwrap();
    // Offered 100/s: count admissions per second.
    let mut per_second = Vec::new();
    for _ in 0..14 {
        let mut admitted = 0;
        for _ in 0..100 {
            if limits.check("upstream/x", 1).await.unwrap().allowed() {
                admitted += 1;
            }
            clock.advance(Duration::from_millis(10));
        }
        per_second.push(admitted);
    }
    eprintln!("admitted per second from cold: {per_second:?}");
    assert!(
        per_second[0] <= 5,
        "cold: about a third of 10/s: {per_second:?}"
    );
    assert!(
        per_second[..10].windows(2).all(|w| w[1] + 1 >= w[0]),
        "ramps up"
    );
    assert!(
        per_second[11..].iter().all(|&n| n == 10),
        "warm: the rate: {per_second:?}"
    );
}
