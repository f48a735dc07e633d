//! Concurrency caps (issue 22) through the layer: slots taken and given back whatever happens
//! to the request — finished, client gone mid-body, inner error, inner panic.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use tokio::sync::Semaphore;
use tollgate::key::PeerAddr;
use tollgate::{Limits, RateLimitLayer};

use tower::ServiceExt;

/// A body that sends one chunk and then waits for `gate` before ending.
struct Gated {
    first: Option<Bytes>,
    gate: Arc<Semaphore>,
}

impl Body for Gated {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(chunk) = self.first.take() {
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        let acquire = self.gate.try_acquire();
        match acquire {
            Ok(permit) => {
                permit.forget();
                Poll::Ready(None)
            }
            Err(_) => {
                // Poll again soon: the test opens the gate by adding a permit.
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
    }
}

/// Keeps the 333 deliberate panics below out of the test output (other panics still print).
fn quiet_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let ours = info
                .payload()
                .downcast_ref::<&str>()
                .is_some_and(|m| m.contains("the inner service panicked"));
            if !ours {
                default(info);
            }
        }));
    });
}

fn request(client: &str) -> Request<()> {
    let mut request = Request::get("/upload").body(()).unwrap();
    let address = format!("{client}:1").parse().unwrap();
    request.extensions_mut().insert(PeerAddr(address));
    request
}

type Layered = tower::util::BoxCloneSyncService<
    Request<()>,
    Response<tollgate::body::ResponseBody<Gated>>,
    Infallible,
>;

/// The layer over a service answering with gated bodies, deciding with `limits` (any
/// store); `calls` counts inner calls.
fn layered_with<St: tollgate::store::Store>(
    limits: &Limits<St>,
    gate: &Arc<Semaphore>,
    calls: &Arc<AtomicUsize>,
) -> Layered {
    let (gate, calls) = (Arc::clone(gate), Arc::clone(calls));
    let inner = tower::service_fn(move |_: Request<()>| {
        calls.fetch_add(1, Ordering::SeqCst);
        let body = Gated {
            first: Some(Bytes::from_static(b"part")),
            gate: Arc::clone(&gate),
        };
        async move { Ok::<_, Infallible>(Response::new(body)) }
    });
    Layered::new(
        tower::ServiceBuilder::new()
            .layer(RateLimitLayer::new(limits.clone()))
            .service(inner),
    )
}

/// The same over an in-memory limiter compiled from `toml`.
fn layered(toml: &str, gate: &Arc<Semaphore>, calls: &Arc<AtomicUsize>) -> (Layered, Limits) {
    let limits = Limits::from_toml(toml).unwrap();
    (layered_with(&limits, gate, calls), limits)
}

#[tokio::test]
async fn three_at_once_against_a_cap_of_two_two_pass_and_the_third_is_refused_at_once() {
    let gate = Arc::new(Semaphore::new(0));
    let calls = Arc::new(AtomicUsize::new(0));
    let (service, limits) = layered("[limits]\nupload = { concurrency = 2 }\n", &gate, &calls);
    let first = service.clone().oneshot(request("192.0.2.1")).await.unwrap();
    let second = service.clone().oneshot(request("192.0.2.1")).await.unwrap();
    let third = service.clone().oneshot(request("192.0.2.1")).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(second.status(), StatusCode::OK);
    assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(third.headers()["retry-after"], "1");
    assert!(
        !third.headers().contains_key("ratelimit"),
        "no rate fields for a concurrency refusal"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "the refused one reached nothing"
    );
    // Another client has slots of its own.
    let other = service.clone().oneshot(request("192.0.2.2")).await.unwrap();
    assert_eq!(other.status(), StatusCode::OK);
    // The first response's body is sent to its end: its slot is free again.
    gate.add_permits(1);
    first.into_body().collect().await.unwrap();
    let fourth = service.clone().oneshot(request("192.0.2.1")).await.unwrap();
    assert_eq!(fourth.status(), StatusCode::OK);
    drop((second, fourth, other));
    assert!(limits.in_flight().is_empty(), "every slot given back");
}

#[tokio::test]
async fn a_thousand_requests_gone_mid_body_errors_and_panics_leak_no_slot() {
    quiet_panics();
    let limits = Limits::from_toml("[limits]\nupload = { concurrency = 3 }\n").unwrap();
    let round = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&round);
    let inner = tower::service_fn(move |_: Request<()>| {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        async move {
            match n % 3 {
                0 => Err("the inner service failed"),
                1 => panic!("the inner service panicked"),
                _ => {
                    let gate = Arc::new(Semaphore::new(0));
                    let body = Gated {
                        first: Some(Bytes::from_static(b"part")),
                        gate,
                    };
                    Ok(Response::new(body))
                }
            }
        }
    });
    let service = tower::ServiceBuilder::new()
        .layer(RateLimitLayer::new(limits.clone()))
        .service(inner);
    let mut outcomes = [0usize; 3];
    for _ in 0..1_000 {
        let service = service.clone();
        // Each in its own task, as a server runs them: a panic ends the task.
        let task = tokio::spawn(async move {
            let response = service.oneshot(request("192.0.2.7")).await?;
            let mut body = response.into_body();
            // The client reads the first chunk, then goes away mid-body.
            let _ = body.frame().await;
            Ok::<StatusCode, &str>(StatusCode::OK)
        });
        match task.await {
            Ok(Ok(_)) => outcomes[0] += 1,
            Ok(Err(_)) => outcomes[1] += 1,
            Err(join) if join.is_panic() => outcomes[2] += 1,
            Err(other) => panic!("{other}"),
        }
    }
    assert_eq!(outcomes.iter().sum::<usize>(), 1_000);
    assert!(outcomes.iter().all(|&n| n > 300), "{outcomes:?}");
    assert!(limits.in_flight().is_empty(), "no slot leaked");
}

#[tokio::test(start_paused = true)]
async fn with_on_limit_delay_a_request_waits_for_a_slot_in_arrival_order() {
    let gate = Arc::new(Semaphore::new(0));
    let calls = Arc::new(AtomicUsize::new(0));
    let toml = "[limits]\nupload = { concurrency = 1, on_limit = \"delay\", max_delay = \"1s\" }\n";
    let (service, limits) = layered(toml, &gate, &calls);
    let first = service.clone().oneshot(request("192.0.2.1")).await.unwrap();
    let second = tokio::spawn(service.clone().oneshot(request("192.0.2.1")));
    tokio::task::yield_now().await;
    let third = tokio::spawn(service.clone().oneshot(request("192.0.2.1")));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(calls.load(Ordering::SeqCst), 1, "both wait");
    // The first finishes: the second (not the third) gets the slot.
    gate.add_permits(1);
    first.into_body().collect().await.unwrap();
    let second = second.await.unwrap().unwrap();
    assert_eq!(second.status(), StatusCode::OK);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    // The third waits out its max_delay behind the second and is refused.
    let third = third.await.unwrap().unwrap();
    assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    drop(second);
    assert!(limits.in_flight().is_empty());
}

#[tokio::test]
async fn a_cap_and_a_rate_on_one_rule_must_both_admit_and_a_refusal_takes_nothing() {
    let gate = Arc::new(Semaphore::new(0));
    let calls = Arc::new(AtomicUsize::new(0));
    let toml = "[limits]\nupload = { rate = \"2/min\", concurrency = 1 }\n";
    let (service, limits) = layered(toml, &gate, &calls);
    let first = service.clone().oneshot(request("192.0.2.1")).await.unwrap();
    assert!(
        first.headers().contains_key("ratelimit"),
        "the rate's headers"
    );
    // Refused by the cap: the rate keeps its second token.
    let busy = service.clone().oneshot(request("192.0.2.1")).await.unwrap();
    assert_eq!(busy.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        limits.peek("upload/192.0.2.1").await.unwrap().remaining(),
        1
    );
    gate.add_permits(1);
    first.into_body().collect().await.unwrap();
    let second = service.clone().oneshot(request("192.0.2.1")).await.unwrap();
    assert_eq!(second.status(), StatusCode::OK);
    gate.add_permits(1);
    second.into_body().collect().await.unwrap();
    // Refused by the rate: no slot is kept.
    let third = service.clone().oneshot(request("192.0.2.1")).await.unwrap();
    assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(third.headers().contains_key("ratelimit"));
    assert!(limits.in_flight().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_share_a_cap_through_redis_and_a_dead_ones_slots_come_back() {
    let Some(server) = crate::support::redis::RedisServer::start("shared concurrency cap") else {
        return;
    };
    let toml = format!(
        "[store]\nbackend = \"redis\"\nurl = \"{}\"\nkey_prefix = \"cap:\"\nconcurrency_lease = \"1s\"\n\
         [limits]\nupload = {{ concurrency = 2 }}\n",
        server.url()
    );
    let build = || {
        tollgate::Limits::builder()
            .store(tollgate::store::BackendStore::new())
            .from_toml(&toml)
            .unwrap()
    };
    let (a, b) = (build(), build());
    let gate = Arc::new(Semaphore::new(0));
    let calls = Arc::new(AtomicUsize::new(0));
    let (on_a, on_b) = (
        layered_with(&a, &gate, &calls),
        layered_with(&b, &gate, &calls),
    );
    let first = on_a.clone().oneshot(request("192.0.2.1")).await.unwrap();
    let second = on_a.clone().oneshot(request("192.0.2.1")).await.unwrap();
    assert_eq!(
        (first.status(), second.status()),
        (StatusCode::OK, StatusCode::OK)
    );
    // The other gateway sees the same two slots taken.
    let refused = on_b.clone().oneshot(request("192.0.2.1")).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers()["retry-after"], "1");
    // A finishes one: B gets it (the release travels in the background).
    gate.add_permits(1);
    first.into_body().collect().await.unwrap();
    let mut taken = None;
    for _ in 0..50 {
        let response = on_b.clone().oneshot(request("192.0.2.1")).await.unwrap();
        if response.status() == StatusCode::OK {
            taken = Some(response);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let on_b_held = taken.expect("the slot A gave back reached B");
    // A dies holding its other slot: no release, no renewal.
    std::mem::forget(second);
    drop((on_a, a));
    let full = on_b.clone().oneshot(request("192.0.2.1")).await.unwrap();
    assert_eq!(
        full.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "A's slot is still leased"
    );
    // Within the lease time (1 s) it comes back; B's own slot, renewed, stays taken.
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    let back = on_b.clone().oneshot(request("192.0.2.1")).await.unwrap();
    assert_eq!(
        back.status(),
        StatusCode::OK,
        "the dead gateway's slot came back"
    );
    let over = on_b.clone().oneshot(request("192.0.2.1")).await.unwrap();
    assert_eq!(
        over.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "B's renewed slot is still held"
    );
    drop((on_b_held, back));
}

/// `RateLimitLayer::axum_body`: responses keep axum's `Body`; a response holding a slot
/// still holds it until its body has ended, and a refusal is the same refusal.
#[tokio::test]
async fn with_axum_bodies_a_slot_is_held_until_the_body_ends_and_refusals_are_unchanged() {
    let limits =
        Limits::from_toml("[limits]\nupload = { concurrency = 1, rate = \"2/min\" }\n").unwrap();
    let gate = Arc::new(Semaphore::new(0));
    let inner_gate = Arc::clone(&gate);
    let inner = tower::service_fn(move |_: Request<()>| {
        let body = Gated {
            first: Some(Bytes::from_static(b"part")),
            gate: Arc::clone(&inner_gate),
        };
        async move { Ok::<_, Infallible>(Response::new(axum::body::Body::new(body))) }
    });
    let service = tower::ServiceBuilder::new()
        .layer(RateLimitLayer::new(limits.clone()).axum_body())
        .service(inner);
    // The response type is axum's own: no wrapper for axum to box again.
    let first: Response<axum::body::Body> =
        service.clone().oneshot(request("192.0.2.1")).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(first.headers()["ratelimit"], "\"upload\";r=1;t=30");
    let busy = service.clone().oneshot(request("192.0.2.1")).await.unwrap();
    assert_eq!(
        busy.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "the slot is held"
    );
    assert_eq!(limits.in_flight().len(), 1);
    gate.add_permits(1);
    let body = first.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"part");
    assert!(
        limits.in_flight().is_empty(),
        "given back at the body's end"
    );
    // The rate's refusal: status, Retry-After, RateLimit fields and the JSON body.
    gate.add_permits(1);
    let second = service.clone().oneshot(request("192.0.2.1")).await.unwrap();
    assert_eq!(second.status(), StatusCode::OK);
    drop(second);
    let refused = service.clone().oneshot(request("192.0.2.1")).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers()["retry-after"], "30");
    assert_eq!(refused.headers()["ratelimit"], "\"upload\";r=0;t=30");
    let body = refused.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        &body[..],
        br#"{"error":"rate_limited","retry_after":30,"limit":"upload"}"#
    );
    assert!(limits.in_flight().is_empty());
}

/// A refusal by a cap shared through Redis is counted once (it was counted twice: once
/// where the shared slot was refused, once where the layer refused the request).
#[tokio::test]
async fn a_refusal_by_a_shared_cap_is_counted_once() {
    let Some(server) = crate::support::redis::RedisServer::start("shared cap counted once") else {
        return;
    };
    let toml = format!(
        "[store]\nbackend = \"redis\"\nurl = \"{}\"\nkey_prefix = \"counted:\"\n\
         [limits]\n\"counted-cap\" = {{ concurrency = 1 }}\n",
        server.url()
    );
    let limits = tollgate::Limits::builder()
        .store(tollgate::store::BackendStore::new())
        .from_toml(&toml)
        .unwrap();
    let gate = Arc::new(Semaphore::new(0));
    let calls = Arc::new(AtomicUsize::new(0));
    let service = layered_with(&limits, &gate, &calls);
    let request = || {
        let mut request = Request::get("/counted-cap").body(()).unwrap();
        request
            .extensions_mut()
            .insert(PeerAddr("192.0.2.9:1".parse().unwrap()));
        request
    };
    // Someone reads the history: every request counts one by one from now on.
    limits.traffic().report(limits.now(), 0);
    let held = service.clone().oneshot(request()).await.unwrap();
    assert_eq!(held.status(), StatusCode::OK);
    let refused = service.clone().oneshot(request()).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let report = limits.traffic().report(limits.now(), 5);
    let rule = report
        .rules
        .iter()
        .find(|r| r.rule == "counted-cap")
        .expect("the rule's traffic");
    // (A rule with a cap and no rate counts its refusals only: passing it decides no rate.)
    assert_eq!(rule.total.refused, 1);
    assert_eq!(rule.top_refused[0].client, "192.0.2.9");
    gate.add_permits(1);
    held.into_body().collect().await.unwrap();
}
