//! YAML text → a small tree of nodes that remember where they were written.
//!
//! saphyr-parser gives events with positions; this folds them into maps, sequences and
//! scalars (all scalars as text: the reader decides what a field's text means). Anchors and
//! aliases are expanded, within a node budget, so an alias bomb is an error, not an
//! allocation storm. One document per file.

use std::collections::HashMap;
use std::ops::Range;

use saphyr_parser::{Event, Parser, ScalarStyle, Span};

use super::super::error::Diagnostic;
use super::super::source::SourceText;

/// Nodes one file may hold, aliases expanded: far above any real rate-limit config.
const MAX_NODES: usize = 1_000_000;

/// A YAML node and the byte range it was written at.
#[derive(Clone, Debug)]
pub(super) struct Node {
    pub(super) kind: Kind,
    pub(super) span: Range<usize>,
    /// Nodes in it, itself included: what copying it for an alias costs.
    size: usize,
}

/// What a node is.
#[derive(Clone, Debug)]
pub(super) enum Kind {
    /// A scalar's text, and whether it was written plain (unquoted).
    Scalar(String, bool),
    Sequence(Vec<Node>),
    Mapping(Vec<(Node, Node)>),
}

impl Node {
    /// What it is, in an error message.
    pub(super) fn describe(&self) -> &'static str {
        match &self.kind {
            Kind::Scalar(..) => "a scalar",
            Kind::Sequence(_) => "a list",
            Kind::Mapping(_) => "a mapping",
        }
    }
}

/// A collection being read.
enum Open {
    Sequence {
        items: Vec<Node>,
        start: usize,
        anchor: usize,
    },
    Mapping {
        entries: Vec<(Node, Node)>,
        key: Option<Node>,
        start: usize,
        anchor: usize,
    },
}

/// The document in `source`, or `None` if it holds none (only comments).
pub(super) fn parse(source: &SourceText) -> Result<Option<Node>, Diagnostic> {
    let mut reader = Reader {
        source,
        open: Vec::new(),
        anchors: HashMap::new(),
        root: None,
        nodes: 0,
        documents: 0,
    };
    let mut parser = Parser::new_from_str(&source.text);
    while let Some(event) = parser.next_event() {
        let (event, span) = event.map_err(|error| {
            let marker = error.marker();
            let at = source.offset(marker.line(), marker.col());
            source.at(at..at, format!("not valid YAML: {}", error.info()))
        })?;
        reader.event(event, span)?;
    }
    Ok(reader.root)
}

struct Reader<'s> {
    source: &'s SourceText,
    open: Vec<Open>,
    anchors: HashMap<usize, Node>,
    root: Option<Node>,
    nodes: usize,
    documents: usize,
}

impl Reader<'_> {
    fn at(&self, marker: saphyr_parser::Marker) -> usize {
        self.source.offset(marker.line(), marker.col())
    }

    fn event(&mut self, event: Event<'_>, span: Span) -> Result<(), Diagnostic> {
        let start = self.at(span.start);
        match event {
            Event::DocumentStart(_) => {
                self.documents += 1;
                if self.documents > 1 {
                    return Err(self
                        .source
                        .at(start..start, "one YAML document per file, found a second"));
                }
            }
            Event::Scalar(text, style, anchor, _) => {
                let plain = style == ScalarStyle::Plain;
                let end = self.at(span.end);
                let node = Node {
                    kind: Kind::Scalar(text.into_owned(), plain),
                    span: start..end.max(start),
                    size: 1,
                };
                self.finish(node, anchor)?;
            }
            Event::Alias(anchor) => {
                let Some(size) = self.anchors.get(&anchor).map(|node| node.size) else {
                    return Err(self.source.at(start..start, "an alias to no anchor"));
                };
                // Counted before it is copied: an alias bomb stops here, small.
                self.count(size, start)?;
                if let Some(node) = self.anchors.get(&anchor).cloned() {
                    self.place(node, 0);
                }
            }
            Event::SequenceStart(anchor, _) => self.open.push(Open::Sequence {
                items: Vec::new(),
                start,
                anchor,
            }),
            Event::MappingStart(anchor, _) => self.open.push(Open::Mapping {
                entries: Vec::new(),
                key: None,
                start,
                anchor,
            }),
            Event::SequenceEnd | Event::MappingEnd => {
                let end = self.at(span.end);
                let (kind, start, anchor) = match self.open.pop() {
                    Some(Open::Sequence {
                        items,
                        start,
                        anchor,
                    }) => (Kind::Sequence(items), start, anchor),
                    Some(Open::Mapping {
                        entries,
                        start,
                        anchor,
                        ..
                    }) => (Kind::Mapping(entries), start, anchor),
                    None => return Ok(()),
                };
                let size = 1 + match &kind {
                    Kind::Sequence(items) => items.iter().map(|n| n.size).sum(),
                    Kind::Mapping(entries) => entries.iter().map(|(k, v)| k.size + v.size).sum(),
                    Kind::Scalar(..) => 0,
                };
                let node = Node {
                    kind,
                    span: start..end.max(start),
                    size,
                };
                self.finish(node, anchor)?;
            }
            Event::Nothing | Event::StreamStart | Event::StreamEnd | Event::DocumentEnd => {}
        }
        Ok(())
    }

    /// A node read whole (its items were counted as they came): counted, and placed.
    fn finish(&mut self, node: Node, anchor: usize) -> Result<(), Diagnostic> {
        self.count(1, node.span.start)?;
        self.place(node, anchor);
        Ok(())
    }

    fn count(&mut self, size: usize, at: usize) -> Result<(), Diagnostic> {
        self.nodes += size;
        if self.nodes > MAX_NODES {
            return Err(self.source.at(
                at..at,
                format!("more than {MAX_NODES} YAML nodes (aliases expanding?)"),
            ));
        }
        Ok(())
    }

    fn place(&mut self, node: Node, anchor: usize) {
        if anchor != 0 {
            self.anchors.insert(anchor, node.clone());
        }
        match self.open.last_mut() {
            Some(Open::Sequence { items, .. }) => items.push(node),
            Some(Open::Mapping { entries, key, .. }) => match key.take() {
                Some(key) => entries.push((key, node)),
                None => *key = Some(node),
            },
            None => self.root = Some(node),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(text: &str) -> Result<Option<Node>, Diagnostic> {
        parse(&SourceText::new("t.yaml", text))
    }

    #[test]
    fn nodes_know_their_lines() {
        let source = SourceText::new(
            "t.yaml",
            "domain: edge\ndescriptors:\n  - key: é\n    value: x\n",
        );
        let root = parse(&source).unwrap().unwrap();
        let Kind::Mapping(entries) = &root.kind else {
            panic!("a mapping")
        };
        let Kind::Sequence(items) = &entries[1].1.kind else {
            panic!("a list")
        };
        let Kind::Mapping(descriptor) = &items[0].kind else {
            panic!("a mapping")
        };
        let value = &descriptor[1].1;
        let at = source.at(value.span.clone(), "");
        assert_eq!((at.line, at.column), (4, 12));
        assert!(matches!(&value.kind, Kind::Scalar(text, true) if text == "x"));
    }

    #[test]
    fn aliases_expand_and_bombs_are_refused() {
        let root = tree("a: &x [1, 2]\nb: *x\n").unwrap().unwrap();
        let Kind::Mapping(entries) = &root.kind else {
            panic!("a mapping")
        };
        assert!(matches!(&entries[1].1.kind, Kind::Sequence(items) if items.len() == 2));
        let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for (name, previous) in ["b", "c", "d", "e", "f", "g"]
            .iter()
            .zip(["a", "b", "c", "d", "e", "f"])
        {
            bomb.push_str(&format!(
                "{name}: &{name} [*{previous}, *{previous}, *{previous}, *{previous}, *{previous}, *{previous}, *{previous}, *{previous}, *{previous}, *{previous}]\n"
            ));
        }
        let error = tree(&bomb).unwrap_err();
        assert!(error.message.contains("aliases expanding"), "{error}");
    }

    #[test]
    fn bad_yaml_and_second_documents_are_refused_with_a_line() {
        let error = tree("a: [1, 2\n").unwrap_err();
        assert!(error.message.starts_with("not valid YAML"), "{error}");
        let error = tree("a: 1\n---\nb: 2\n").unwrap_err();
        assert_eq!(error.line, 2);
        assert!(tree("# nothing\n").unwrap().is_none());
    }
}
