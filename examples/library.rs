//! tollgate without HTTP: "5 failed logins per user per hour", and replaying an audit log.
//!
//! ```sh
//! cargo run --example library
//! ```
//!
//! The same rules, keys and buckets as the layer — `check(key, cost)` takes tokens now,
//! `check_at(key, cost, when)` at a time the caller supplies (events in any order), and
//! `peek(key)` looks without taking.

// A demonstration: printing what happens is the program's whole output.
#![allow(clippy::print_stdout)]

use std::time::{Duration, SystemTime};

use tollgate::Limits;
use tollgate::clock::Timestamp;

const LIMITS: &str = r#"
[limits]
"failed-login" = { rate = "5/h", strict = true }   # after the 5th failure, every try waits
"#;

/// Whether `user` may try to log in again, after a failure.
async fn record_failure(
    limits: &Limits,
    user: &str,
) -> Result<String, tollgate::store::StoreError> {
    let decision = limits.check(&format!("failed-login/{user}"), 1).await?;
    Ok(if decision.allowed() {
        format!("{user}: {} more tries this hour", decision.remaining())
    } else {
        format!(
            "{user}: locked out, try again in {} s",
            decision.retry_after_secs()
        )
    })
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let limits = Limits::from_toml(LIMITS)?;
    for _ in 0..6 {
        println!("{}", record_failure(&limits, "alice").await?);
    }
    println!("{}", record_failure(&limits, "bob").await?);
    let state = limits.peek("failed-login/alice").await?;
    println!(
        "alice, looked at without taking: {} left under rule {:?}",
        state.remaining(),
        state.rule()
    );

    // Replaying yesterday's audit log, out of order: each event at its own time.
    let replay = Limits::from_toml(LIMITS)?;
    let start = Timestamp::from(SystemTime::now() - Duration::from_secs(86_400));
    let events = [
        (0, "carol"),
        (60, "carol"),
        (30, "carol"),
        (120, "carol"),
        (90, "carol"),
        (150, "carol"),
        (7_200, "carol"),
    ];
    for (offset, user) in events {
        let decision = replay
            .check_at(
                &format!("failed-login/{user}"),
                1,
                start + Duration::from_secs(offset),
            )
            .await?;
        println!(
            "replay +{offset:>5} s {user}: {}",
            if decision.allowed() {
                "counted"
            } else {
                "over the limit"
            }
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_sixth_failure_in_an_hour_locks_the_user_out() {
        let limits = Limits::from_toml(LIMITS).unwrap();
        for left in (0..5).rev() {
            assert_eq!(
                record_failure(&limits, "alice").await.unwrap(),
                format!("alice: {left} more tries this hour")
            );
        }
        assert_eq!(
            record_failure(&limits, "alice").await.unwrap(),
            "alice: locked out, try again in 720 s"
        );
        assert_eq!(
            record_failure(&limits, "bob").await.unwrap(),
            "bob: 4 more tries this hour"
        );
    }
}
