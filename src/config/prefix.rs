//! Rule keys as a trie of segments: finding a request's rule is one hash probe per route
//! segment plus at most one for the client, however many rules there are.

use std::borrow::Cow;

use super::rule::Rule;

/// Rule keys as a trie of segments.
#[derive(Debug, Default)]
pub(super) struct PrefixTable {
    nodes: Vec<Node>,
}

#[derive(Debug, Default)]
struct Node {
    rule: Option<usize>,
    children: hashbrown::HashMap<Box<str>, usize, foldhash::fast::RandomState>,
}

impl PrefixTable {
    /// The trie of `rules`' keys; a node's rule is an index into `rules`.
    pub(super) fn build(rules: &[Rule]) -> PrefixTable {
        let mut table = PrefixTable {
            nodes: vec![Node::default()],
        };
        for (index, rule) in rules.iter().enumerate() {
            let mut at = 0;
            for segment in Segments(rule.key()) {
                at = match table.nodes[at].children.get(segment) {
                    Some(&next) => next,
                    None => {
                        let next = table.nodes.len();
                        table.nodes.push(Node::default());
                        table.nodes[at].children.insert(segment.into(), next);
                        next
                    }
                };
            }
            table.nodes[at].rule = Some(index);
        }
        table
    }

    /// Whether some rule key starts with the segment `first`.
    pub(super) fn has_first_segment(&self, first: &str) -> bool {
        self.nodes
            .first()
            .is_some_and(|root| root.children.contains_key(first))
    }

    /// The index of the rule whose key is the longest segment prefix of `route/client`,
    /// asking for the client segment only if some rule could name one at this route.
    pub(super) fn longest_prefix<'c>(
        &self,
        route: &str,
        client: impl FnOnce() -> Cow<'c, str>,
        case_insensitive: bool,
    ) -> Option<usize> {
        let mut node = self.nodes.first()?;
        let mut best = node.rule;
        for segment in Segments(route) {
            match node.children.get(segment).and_then(|&i| self.nodes.get(i)) {
                Some(next) => {
                    node = next;
                    best = next.rule.or(best);
                }
                None => return best,
            }
        }
        if !node.children.is_empty() {
            let client = client();
            let found = if case_insensitive && client.chars().any(char::is_uppercase) {
                node.children.get(client.to_lowercase().as_str())
            } else {
                node.children.get(client.as_ref())
            };
            if let Some(next) = found.and_then(|&i| self.nodes.get(i)) {
                best = next.rule.or(best);
            }
        }
        best
    }

    /// Walks `segments` from the root as [`longest_prefix`](Self::longest_prefix) does and
    /// says, for the root and then each segment, whether a rule is configured at exactly that
    /// prefix. The walk stops after the first segment no rule key continues with.
    pub(super) fn trace<'s>(
        &self,
        segments: impl IntoIterator<Item = &'s str>,
        case_insensitive: bool,
    ) -> Vec<bool> {
        let mut node = self.nodes.first();
        let mut found = vec![node.is_some_and(|n| n.rule.is_some())];
        for segment in segments {
            let lookup = if case_insensitive {
                Cow::Owned(segment.to_lowercase())
            } else {
                Cow::Borrowed(segment)
            };
            node = node
                .and_then(|n| n.children.get(lookup.as_ref()))
                .and_then(|&i| self.nodes.get(i));
            found.push(node.is_some_and(|n| n.rule.is_some()));
            if node.is_none() {
                break;
            }
        }
        found
    }
}

/// The non-empty `/`-separated segments of a route, found byte by byte: cheaper than
/// `str::split` for the short segments of a URL path.
pub(super) struct Segments<'a>(pub(super) &'a str);

impl<'a> Iterator for Segments<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        loop {
            if self.0.is_empty() {
                return None;
            }
            let end = self
                .0
                .bytes()
                .position(|b| b == b'/')
                .unwrap_or(self.0.len());
            let (segment, rest) = self.0.split_at(end);
            self.0 = rest.get(1..).unwrap_or("");
            if !segment.is_empty() {
                return Some(segment);
            }
        }
    }
}
