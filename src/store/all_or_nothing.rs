//! The rules of a decision over several buckets ([`Store::check_all`](super::Store::check_all)),
//! written once for the in-memory store's atomic one and the trait's default: requests
//! naming one bucket are decided as one, their costs summed; all or nothing is for taking
//! (a charge or a refund reaches every bucket); when one refuses, the others only peek —
//! except a strict bucket that refuses, which still holds its refill back.

use crate::algorithm::CheckMode;
use crate::decision::Decision;
use crate::store::CheckRequest;

/// `requests` by bucket, in first-seen order, each with its costs summed and what `extra`
/// says of it; and for each request, the index of its bucket.
pub(crate) fn by_bucket<'a, T>(
    requests: &[CheckRequest<'a>],
    mut extra: impl FnMut(&CheckRequest<'a>) -> T,
) -> (Vec<(CheckRequest<'a>, T)>, Vec<usize>) {
    let mut buckets: Vec<(CheckRequest<'a>, T)> = Vec::with_capacity(requests.len());
    let mut member = Vec::with_capacity(requests.len());
    for request in requests {
        match buckets
            .iter()
            .position(|(first, _)| first.bucket == request.bucket)
        {
            Some(at) => {
                let first = &mut buckets[at].0;
                first.cost = first.cost.saturating_add(request.cost);
                member.push(at);
            }
            None => {
                member.push(buckets.len());
                buckets.push((*request, extra(request)));
            }
        }
    }
    (buckets, member)
}

/// Whether any request takes only if all are admitted (else each is decided alone).
pub(crate) fn consuming(requests: &[CheckRequest<'_>]) -> bool {
    requests.iter().any(|r| r.mode == CheckMode::Consume)
}

/// Whether `request`, whose peek said `peek`, is decided in its own mode once every
/// bucket has been looked at (`admitted`: all would admit); else its peek is the answer.
pub(crate) fn takes(request: &CheckRequest<'_>, peek: &Decision, admitted: bool) -> bool {
    admitted || (request.strict && !peek.allowed())
}

/// One decision per request, in the requests' order, from one per bucket.
pub(crate) fn in_order(decided: &[Decision], member: &[usize]) -> Vec<Decision> {
    member.iter().map(|&at| decided[at].clone()).collect()
}
