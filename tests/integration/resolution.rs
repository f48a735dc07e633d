//! `resolution` on a sliding window: a burst fades sub-window by sub-window instead of
//! weighing into the whole next period; bad resolutions are refused where written.

use std::time::Duration;

use tollgate::Limits;
use tollgate::clock::FakeClock;

use crate::support::now_or_never;

fn remaining(limits: &Limits) -> u64 {
    now_or_never(limits.peek("c")).unwrap().remaining()
}

#[test]
fn a_burst_leaves_the_period_sub_window_by_sub_window() {
    let rule = |resolution: &str| {
        let clock = FakeClock::new();
        let limits = Limits::builder()
            .clock(clock.clone())
            .from_toml(&format!(
                "[limits]\n\"/\" = {{ rate = \"60/min\", algorithm = \"sliding-window\"{resolution} }}\n"
            ))
            .unwrap();
        (limits, clock)
    };
    let (coarse, coarse_clock) = rule("");
    let (fine, fine_clock) = rule(", resolution = \"10s\"");
    // 60 requests spread over the first minute (FakeClock starts on a minute boundary).
    for _ in 0..60 {
        assert!(now_or_never(coarse.check("c", 1)).unwrap().allowed());
        assert!(now_or_never(fine.check("c", 1)).unwrap().allowed());
        coarse_clock.advance(Duration::from_secs(1));
        fine_clock.advance(Duration::from_secs(1));
    }
    // 30 s later, half the minute's requests are out of the sliding minute.
    coarse_clock.advance(Duration::from_secs(30));
    fine_clock.advance(Duration::from_secs(30));
    assert_eq!(
        remaining(&fine),
        30,
        "sub-windows: exact for spread traffic"
    );
    assert_eq!(
        remaining(&coarse),
        30,
        "the two-window estimate agrees here"
    );
    // Now a burst late in the minute, then 20 s into the next one.
    let (coarse, coarse_clock) = rule("");
    let (fine, fine_clock) = rule(", resolution = \"10s\"");
    coarse_clock.advance(Duration::from_secs(45));
    fine_clock.advance(Duration::from_secs(45));
    for _ in 0..60 {
        now_or_never(coarse.check("c", 1)).unwrap();
        now_or_never(fine.check("c", 1)).unwrap();
    }
    coarse_clock.advance(Duration::from_secs(35)); // 1:20
    fine_clock.advance(Duration::from_secs(35));
    // All 60 were admitted at 0:45, so all are still inside (0:20, 1:20]: none is free.
    assert_eq!(
        remaining(&fine),
        0,
        "the burst's sub-window [40 s, 50 s) is still fully inside"
    );
    assert_eq!(
        remaining(&coarse),
        20,
        "the two-window counter weighs the whole previous minute by 2/3, as if spread over it"
    );
    fine_clock.advance(Duration::from_secs(30)); // 1:50: [40 s, 50 s) has left
    assert_eq!(remaining(&fine), 60);
}

#[test]
fn bad_resolutions_are_refused_where_written() {
    let error = |fields: &str| {
        Limits::from_toml(&format!(
            "[limits]\napi = {{ rate = \"100/min\"{fields} }}\n"
        ))
        .unwrap_err()
        .to_string()
    };
    let gcra = error(", resolution = \"10s\"");
    assert!(
        gcra.contains("<inline>:2:40") && gcra.contains("sliding-window"),
        "{gcra}"
    );
    let uneven = error(", algorithm = \"sliding-window\", resolution = \"7s\"");
    assert!(uneven.contains("1 to 60 equal sub-windows"), "{uneven}");
    let fine = error(", algorithm = \"sliding-window\", resolution = \"100ms\"");
    assert!(fine.contains("1 to 60 equal sub-windows"), "{fine}");
    let words = error(", algorithm = \"sliding-window\", resolution = \"soon\"");
    assert!(words.contains("not a duration"), "{words}");
}
