//! Where a rule is written: what the steps compiling one rule point their diagnostics at.

use std::ops::Range;

use super::super::source::SourceText;

/// A list field as written: each value, with its own span when it was written as a list.
pub(super) type Written<T> = Vec<(T, Option<Range<usize>>)>;

/// Where one rule is written, for pointing at its fields.
pub(super) struct At<'a> {
    pub(super) source: &'a SourceText,
    /// The rule's key.
    pub(super) name: &'a str,
    /// The whole rule: where a problem with no field of its own is shown.
    pub(super) rule: Range<usize>,
}

impl At<'_> {
    /// A field's own span, or (for a field the rule leaves out) the rule's.
    pub(super) fn field(&self, span: Option<&Range<usize>>, field: Range<usize>) -> Range<usize> {
        match span {
            Some(span) => span.clone(),
            None if field.is_empty() => self.rule.clone(),
            None => field,
        }
    }
}
