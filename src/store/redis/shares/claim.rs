//! The claims' calls: a batch of budgets in one call of `shares.lua` per
//! [`CLAIMS_PER_CALL`], each budget a hash under the one `{shares}` tag.

use std::time::Duration;

use super::super::RedisStore;
use super::super::answer::unavailable_within;
use super::{CLAIMS_PER_CALL, ShareClaim, SharePart, ShareTerms};
use crate::store::StoreError;

/// The largest rate sent, millionths a second (a billion tokens a second).
const MAX_MICROS: f64 = 1e15;

/// `per_second` in whole millionths, rounded down.
fn micros(per_second: f64) -> String {
    let micros = (per_second * 1e6).floor();
    if micros.is_finite() {
        (micros.clamp(0.0, MAX_MICROS) as i64).to_string()
    } else if micros > 0.0 {
        (MAX_MICROS as i64).to_string()
    } else {
        "0".to_owned()
    }
}

impl RedisStore {
    /// Claims this instance's part of each budget in `claims`, among every instance
    /// claiming the same budgets in this Redis, as `terms` say; the parts in the order of
    /// `claims`. Waits `[store] timeout` (at least 250 ms) per call of the script.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tollgate::config::RedisSettings;
    /// use tollgate::store::{RedisStore, ShareClaim, ShareTerms};
    ///
    /// # async fn example() -> Result<(), tollgate::store::StoreError> {
    /// let store = RedisStore::new(&RedisSettings::default())?;
    /// let claims = [ShareClaim::new("api", 100.0, 20).demand(40.0)];
    /// let parts = store.claim_shares(&claims, &ShareTerms::new(Duration::from_secs(17))).await?;
    /// assert!(parts[0].rate <= 100.0);
    /// # Ok(()) }
    /// ```
    pub async fn claim_shares(
        &self,
        claims: &[ShareClaim],
        terms: &ShareTerms,
    ) -> Result<Vec<SharePart>, StoreError> {
        let settings = self.inner.settings.load_full();
        let wait = settings.timeout.max(Duration::from_millis(250));
        let mut parts = Vec::with_capacity(claims.len());
        for batch in claims.chunks(CLAIMS_PER_CALL) {
            let keys: Vec<String> = batch
                .iter()
                .map(|claim| format!("{}{{shares}}{}", settings.key_prefix, claim.budget))
                .collect();
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            let per_mille =
                |part: f64| ((part * 1000.0).round().clamp(0.0, 1000.0) as u32).to_string();
            let mut args = vec![
                self.inner.hybrid.id.clone(),
                terms.lifetime.as_millis().max(1).to_string(),
                per_mille(terms.floor),
                per_mille(terms.hysteresis),
            ];
            for claim in batch {
                args.extend([
                    micros(claim.rate),
                    claim.burst.to_string(),
                    micros(claim.demand),
                    micros(claim.held_rate),
                    claim.held_burst.to_string(),
                    micros(claim.part_rate),
                    claim.part_burst.to_string(),
                ]);
            }
            let call = self.inner.pool.shares(&settings, &keys, &args);
            let reply = unavailable_within(wait, call).await?;
            if reply.len() != batch.len() * 3 {
                return Err(StoreError::Unavailable {
                    reason: format!(
                        "the shares script answered {} numbers for {} budgets",
                        reply.len(),
                        batch.len()
                    ),
                });
            }
            parts.extend(reply.chunks_exact(3).map(|part| SharePart {
                rate: part[0].max(0) as f64 / 1e6,
                burst: u32::try_from(part[1].max(0)).unwrap_or(u32::MAX),
                instances: u32::try_from(part[2].max(1)).unwrap_or(u32::MAX),
            }));
        }
        Ok(parts)
    }
}

#[cfg(test)]
mod tests {
    use super::micros;

    #[test]
    fn rates_are_sent_in_whole_millionths_rounded_down_and_bounded() {
        assert_eq!(micros(1.5), "1500000");
        assert_eq!(micros(1.0 / 3.0), "333333");
        assert_eq!(micros(-2.0), "0");
        assert_eq!(micros(f64::NAN), "0");
        assert_eq!(micros(f64::INFINITY), "1000000000000000");
    }
}
