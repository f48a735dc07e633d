//! A request as a decision needs it once the caller's borrowed one is gone: what a
//! fallback decides with after Redis failed or was too slow.

use crate::Quota;
use crate::algorithm::{Algorithm, CheckMode};
use crate::clock::Timestamp;
use crate::key::Client;
use crate::store::{BucketRef, CheckRequest, RuleId};

/// What a decision needs after the caller's borrowed request is gone (for a fallback).
pub(super) struct OwnedRequest {
    pub(super) rule: RuleId,
    pub(super) client: Option<Client<'static>>,
    pub(super) quotas: Vec<Quota>,
    pub(super) cost: u64,
    pub(super) algorithm: Algorithm,
    pub(super) strict: bool,
    pub(super) shaping: crate::Shaping,
    pub(super) now: Timestamp,
    pub(super) mode: CheckMode,
}

impl OwnedRequest {
    pub(super) fn new(request: &CheckRequest<'_>) -> OwnedRequest {
        OwnedRequest {
            rule: request.bucket.rule,
            client: request.bucket.client.map(|c| c.clone().into_owned()),
            quotas: request.quotas.to_vec(),
            cost: request.cost,
            algorithm: request.algorithm,
            strict: request.strict,
            shaping: *request.shaping,
            now: request.now,
            mode: request.mode,
        }
    }

    pub(super) fn as_check(&self) -> CheckRequest<'_> {
        CheckRequest {
            bucket: BucketRef {
                rule: self.rule,
                client: self.client.as_ref(),
            },
            quotas: &self.quotas,
            cost: self.cost,
            algorithm: self.algorithm,
            strict: self.strict,
            shaping: &self.shaping,
            now: self.now,
            mode: self.mode,
        }
    }
}
