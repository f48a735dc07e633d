//! A request's descriptors as keys: domain `D` and entries `(k1, v1), (k2, v2)` are the
//! key `D/k1/v1/k2/v2`, every part one segment ([`encode_segment`]), decided by longest
//! segment prefix against the live rules.
//!
//! The key is already in matching form: it is not percent-decoded again (a `/` in a value
//! stays `%2F`), and the route is folded to lower case if `[key] case_insensitive` says so.
//!
//! An entry whose key is [`PLAN_ENTRY`] (`tollgate.plan`: a name no descriptor of one's
//! own would use, so that existing `plan` entries keep their meaning) is not part of the
//! key: its value is the plan the descriptor's client is on, choosing the rule's limits for
//! that plan (as an authenticator's plan header does over HTTP). Without one, `[plans]`
//! membership (by the last value) or its default chooses.

use tonic::Status;

use super::options::GrpcOptions;
use super::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use super::proto::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate::KeyCheck;
use tollgate::key::encode_segment;

/// The descriptor entry that names a plan rather than a part of the key.
pub(super) const PLAN_ENTRY: &str = "tollgate.plan";

/// One descriptor's key and cost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct DescriptorKey {
    /// `D/k1/v1/…`, encoded.
    key: String,
    /// Where the last segment starts.
    last: usize,
    cost: u64,
    /// The value of its `plan` entry.
    plan: Option<String>,
}

impl DescriptorKey {
    /// The key, as shown in logs.
    #[cfg(test)]
    pub(super) fn key(&self) -> &str {
        &self.key
    }

    /// The key as [`Limits::check_keys`](tollgate::Limits) takes it.
    pub(super) fn check(&self) -> KeyCheck<'_> {
        let (route, last) = self.key.split_at(self.last);
        let check = KeyCheck::new(route.strip_suffix('/').unwrap_or(route), last).cost(self.cost);
        match &self.plan {
            Some(plan) => check.plan(plan),
            None => check,
        }
    }
}

/// The request's descriptors as keys, in order; `INVALID_ARGUMENT` naming the first thing
/// wrong with it.
pub(super) fn keys(
    request: &RateLimitRequest,
    options: &GrpcOptions,
    fold_case: bool,
) -> Result<Vec<DescriptorKey>, Status> {
    let invalid = |message: String| Err(Status::invalid_argument(message));
    if request.domain.is_empty() {
        return invalid("domain is empty".into());
    }
    if request.descriptors.is_empty() {
        return invalid("no descriptors".into());
    }
    if request.descriptors.len() > options.max_descriptors {
        return invalid(format!(
            "{} descriptors, more than the {} allowed",
            request.descriptors.len(),
            options.max_descriptors
        ));
    }
    check_field("domain", &request.domain, options)?;
    let request_cost = u64::from(request.hits_addend.max(1));
    request
        .descriptors
        .iter()
        .enumerate()
        .map(|(at, descriptor)| {
            descriptor_key(&request.domain, descriptor, options, fold_case)
                .map(|(key, last, plan)| DescriptorKey {
                    key,
                    last,
                    cost: descriptor.hits_addend.unwrap_or(request_cost),
                    plan,
                })
                .map_err(|message| Status::invalid_argument(format!("descriptor {at}: {message}")))
        })
        .collect()
}

/// `domain/k1/v1/…`, where its last segment starts and the plan its `plan` entry names, or
/// what is wrong.
fn descriptor_key(
    domain: &str,
    descriptor: &RateLimitDescriptor,
    options: &GrpcOptions,
    fold_case: bool,
) -> Result<(String, usize, Option<String>), String> {
    let mut plan = None;
    let mut entries = Vec::with_capacity(descriptor.entries.len());
    for entry in &descriptor.entries {
        if entry.key == PLAN_ENTRY {
            if entry.value.is_empty() || entry.value.len() > 64 || plan.is_some() {
                return Err("a plan entry must be given once, with a name of 1 to 64 bytes".into());
            }
            plan = Some(entry.value.clone());
        } else {
            entries.push(entry);
        }
    }
    if entries.is_empty() {
        return Err("no entries".into());
    }
    if entries.len() > options.max_entries {
        return Err(format!(
            "{} entries, more than the {} allowed",
            entries.len(),
            options.max_entries
        ));
    }
    let mut key = String::with_capacity(domain.len() + entries.len() * 16);
    push_segment(&mut key, domain);
    for (at, entry) in entries.iter().enumerate() {
        if entry.key.is_empty() {
            return Err(format!("entry {at} has an empty key"));
        }
        if entry.value.is_empty() {
            return Err(format!("entry {at} ({}) has an empty value", entry.key));
        }
        for (what, text) in [("key", &entry.key), ("value", &entry.value)] {
            check_field(what, text, options).map_err(|status| status.message().to_owned())?;
        }
        key.push('/');
        push_segment(&mut key, &entry.key);
        key.push('/');
        if at + 1 == entries.len() {
            // The last segment is matched as a client is: the matcher folds it if need be.
            if fold_case {
                key = key.to_lowercase();
            }
            let last = key.len();
            push_segment(&mut key, &entry.value);
            return Ok((key, last, plan));
        }
        push_segment(&mut key, &entry.value);
    }
    Err("no entries".into())
}

fn push_segment(key: &mut String, text: &str) {
    key.push_str(&encode_segment(text));
}

fn check_field(what: &str, text: &str, options: &GrpcOptions) -> Result<(), Status> {
    if text.len() > options.max_field_bytes {
        return Err(Status::invalid_argument(format!(
            "{what} is {} bytes, more than the {} allowed",
            text.len(),
            options.max_field_bytes
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
    use super::*;

    fn request(domain: &str, descriptors: &[&[(&str, &str)]]) -> RateLimitRequest {
        RateLimitRequest {
            domain: domain.into(),
            descriptors: descriptors
                .iter()
                .map(|entries| RateLimitDescriptor {
                    entries: entries
                        .iter()
                        .map(|(key, value)| Entry {
                            key: (*key).into(),
                            value: (*value).into(),
                        })
                        .collect(),
                    ..Default::default()
                })
                .collect(),
            hits_addend: 0,
        }
    }

    #[test]
    fn entries_become_segments_and_slashes_stay_inside_theirs() {
        let options = GrpcOptions::default();
        let keys = keys(
            &request(
                "edge",
                &[&[("remote_address", "203.0.113.7"), ("path", "/v1/users")]],
            ),
            &options,
            false,
        )
        .unwrap();
        assert_eq!(
            keys[0].key(),
            "edge/remote_address/203.0.113.7/path/%2Fv1%2Fusers"
        );
        let check = keys[0].check();
        assert_eq!(check.route(), "edge/remote_address/203.0.113.7/path");
        assert_eq!(check.last(), "%2Fv1%2Fusers");
        assert_eq!(check.tokens(), Some(1), "hits_addend 0 means 1");
    }

    #[test]
    fn folding_lowers_the_route_and_leaves_the_last_value_to_the_matcher() {
        let keys = keys(
            &request("Edge", &[&[("Tenant", "ACME")]]),
            &GrpcOptions::default(),
            true,
        )
        .unwrap();
        let check = keys[0].check();
        assert_eq!((check.route(), check.last()), ("edge/tenant", "ACME"));
    }

    #[test]
    fn bad_requests_say_what_is_wrong() {
        let options = GrpcOptions::default();
        let message = |request: RateLimitRequest| {
            keys(&request, &options, false)
                .unwrap_err()
                .message()
                .to_owned()
        };
        assert_eq!(message(request("", &[&[("k", "v")]])), "domain is empty");
        assert_eq!(message(request("d", &[])), "no descriptors");
        assert_eq!(message(request("d", &[&[]])), "descriptor 0: no entries");
        assert_eq!(
            message(request("d", &[&[("k", "v")], &[("k", "")]])),
            "descriptor 1: entry 0 (k) has an empty value"
        );
        assert_eq!(
            message(request("d", &[&[("", "v")]])),
            "descriptor 0: entry 0 has an empty key"
        );
        let long = "x".repeat(options.max_field_bytes + 1);
        assert_eq!(
            message(request("d", &[&[("k", &long)]])),
            "descriptor 0: value is 1025 bytes, more than the 1024 allowed"
        );
        let many: Vec<(&str, &str)> = vec![("k", "v"); options.max_entries + 1];
        assert_eq!(
            message(request("d", &[&many])),
            "descriptor 0: 17 entries, more than the 16 allowed"
        );
    }
}
