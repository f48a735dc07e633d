//! What Envoys are told: each bucket's action as RLQS says it (a token bucket, allow-all,
//! abandon), and the responses to each stream, one per Envoy per division.

use std::collections::HashMap;
use std::time::Duration;

use tokio::sync::mpsc;
use tonic::Status;

use super::division::{Action, EnvoyId};
use crate::grpc::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::{
    BucketAction, bucket_action,
};
use crate::grpc::proto::envoy::service::rate_limit_quota::v3::{BucketId, RateLimitQuotaResponse};
use crate::grpc::proto::envoy::r#type::v3::{RateLimitStrategy, TokenBucket, rate_limit_strategy};

/// Each open stream's outbox.
pub(crate) type Outboxes = HashMap<EnvoyId, mpsc::Sender<Result<RateLimitQuotaResponse, Status>>>;

/// Sends each Envoy its actions, one response per Envoy; a stream whose outbox is full
/// is ended (it cannot keep up) rather than waited for.
pub(crate) fn deliver(outboxes: &mut Outboxes, sends: Vec<(EnvoyId, BucketAction)>) {
    let mut by_envoy: HashMap<EnvoyId, Vec<BucketAction>> = HashMap::new();
    for (to, action) in sends {
        let kind = match &action.bucket_action {
            Some(bucket_action::BucketAction::AbandonAction(_)) => "abandon",
            Some(bucket_action::BucketAction::QuotaAssignmentAction(assignment)) => {
                match assignment
                    .rate_limit_strategy
                    .as_ref()
                    .and_then(|strategy| strategy.strategy.as_ref())
                {
                    Some(rate_limit_strategy::Strategy::TokenBucket(_)) => "token_bucket",
                    _ => "allow_all",
                }
            }
            None => "none",
        };
        metrics::counter!("tollgate_rlqs_assignments_total", "action" => kind).increment(1);
        by_envoy.entry(to).or_default().push(action);
    }
    for (to, actions) in by_envoy {
        let Some(outbox) = outboxes.get(&to) else {
            continue;
        };
        let response = RateLimitQuotaResponse {
            bucket_action: actions,
        };
        if outbox.try_send(Ok(response)).is_err() {
            let _ = outbox.try_send(Err(Status::resource_exhausted(
                "assignments were not read in time",
            )));
            outboxes.remove(&to);
        }
    }
}

/// An action for bucket `id`.
pub(crate) fn bucket_action(id: BucketId, action: Action, ttl: Duration) -> BucketAction {
    let ttl = prost_types::Duration::try_from(ttl).ok();
    let assign = |strategy| {
        bucket_action::BucketAction::QuotaAssignmentAction(bucket_action::QuotaAssignmentAction {
            assignment_time_to_live: ttl,
            rate_limit_strategy: Some(RateLimitStrategy {
                strategy: Some(strategy),
            }),
        })
    };
    let action = match action {
        Action::Assign(share) => assign(rate_limit_strategy::Strategy::TokenBucket(TokenBucket {
            max_tokens: share.max_tokens,
            tokens_per_fill: Some(share.tokens_per_fill),
            fill_interval: prost_types::Duration::try_from(share.fill_interval).ok(),
        })),
        Action::AllowAll => assign(rate_limit_strategy::Strategy::BlanketRule(
            rate_limit_strategy::BlanketRule::AllowAll.into(),
        )),
        Action::Abandon => {
            bucket_action::BucketAction::AbandonAction(bucket_action::AbandonAction {})
        }
    };
    BucketAction {
        bucket_id: Some(id),
        bucket_action: Some(action),
    }
}
