//! What a request's JSON body says that limits can use: the values at the JSON pointers
//! the rules name (`"json:/model"` as a key part or an `also` limit's `per`), the model,
//! and what estimates need — the prompt's text length and the output ceiling.
//!
//! The body is walked once, without building a document: only the fields asked for and
//! the prompt's text are looked at, everything else is skipped as it is parsed, so a 1 MiB
//! body is never held twice. The prompt's text is what the big LLM APIs put there, not
//! the JSON around it: the strings of `messages`, `input`, `instructions`, `system`,
//! `prompt`, `contents` and `systemInstruction` that are such a field itself, an element
//! of its list, or a `content` or `text` value inside it (so roles, types, ids and image
//! URLs are not counted). The output ceiling is `max_tokens`, `max_completion_tokens`,
//! `max_output_tokens` or Gemini's `generationConfig.maxOutputTokens`.
//!
//! ```
//! use tollgate::key::RequestJson;
//!
//! let body = br#"{"model":"gpt-4o","max_tokens":300,
//!   "messages":[{"role":"system","content":"Be brief."},
//!               {"role":"user","content":[{"type":"text","text":"Hello there"}]}]}"#;
//! let json = RequestJson::read(body, &["/model".to_owned()]);
//! assert_eq!(json.value("/model"), Some("gpt-4o"));
//! assert_eq!(json.model(), Some("gpt-4o"));
//! assert_eq!(json.prompt_bytes(), 9 + 11, "the texts, not the JSON");
//! assert_eq!(json.prompt_tokens(), 5, "bytes ÷ 4, rounded up");
//! assert_eq!(json.output_ceiling(), Some(300));
//! ```

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize as _;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// The most of a request body read for its JSON (1 MiB); a longer body is forwarded
/// unread.
pub const MAX_REQUEST_JSON: usize = 1 << 20;

/// The top-level fields whose text is the prompt.
const PROMPT_FIELDS: [&str; 7] = [
    "messages",
    "input",
    "instructions",
    "system",
    "prompt",
    "contents",
    "systemInstruction",
];

/// The fields that say how many tokens may be generated.
const CEILINGS: [&str; 4] = [
    "/max_tokens",
    "/max_completion_tokens",
    "/max_output_tokens",
    "/generationConfig/maxOutputTokens",
];

const MODEL: &str = "/model";

/// What a request's JSON body says, read once (by [`ReadBody`](crate::ReadBody) or by
/// the application) and kept in the request's extensions, where key parts and estimates
/// find it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestJson {
    /// Each pointer asked for, with its value if it is a string, number or boolean.
    values: Vec<(String, Option<String>)>,
    model: Option<String>,
    prompt_bytes: u64,
    output_ceiling: Option<u64>,
    problem: Option<BodyProblem>,
}

/// Why a request body could not be read as JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BodyProblem {
    /// Longer than [`MAX_REQUEST_JSON`]: forwarded unread.
    TooLarge,
    /// Not JSON (or JSON nested deeper than 128 levels).
    NotJson,
    /// The body failed while it was read.
    Broken,
}

impl fmt::Display for BodyProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BodyProblem::TooLarge => "request body larger than 1 MiB",
            BodyProblem::NotJson => "request body is not JSON",
            BodyProblem::Broken => "request body failed while read",
        })
    }
}

impl RequestJson {
    /// Reads `body`, keeping the values at `pointers` (JSON pointers, RFC 6901) beside the
    /// model, the prompt's length and the output ceiling.
    pub fn read(body: &[u8], pointers: &[String]) -> RequestJson {
        RequestJson::read_with(pointers, |walk| {
            let mut deserializer = serde_json::Deserializer::from_slice(body);
            walk.deserialize(&mut deserializer)?;
            deserializer.end()
        })
    }

    /// Reads a body that arrived in several pieces, without joining them.
    pub fn read_chunks(chunks: &[bytes::Bytes], pointers: &[String]) -> RequestJson {
        RequestJson::read_with(pointers, |walk| {
            let mut deserializer = serde_json::Deserializer::from_reader(Chunks {
                chunks,
                at: 0,
                offset: 0,
            });
            walk.deserialize(&mut deserializer)?;
            deserializer.end()
        })
    }

    fn read_with(
        pointers: &[String],
        parse: impl FnOnce(Walk<'_, '_>) -> Result<(), serde_json::Error>,
    ) -> RequestJson {
        let mut found = Found {
            wanted: pointers,
            values: pointers.iter().map(|p| (p.clone(), None)).collect(),
            ..Found::default()
        };
        let mut path = String::new();
        let walk = Walk {
            found: &mut found,
            path: &mut path,
            text: Text::Off,
        };
        match parse(walk) {
            Ok(()) => RequestJson {
                values: found.values,
                model: found.model,
                prompt_bytes: found.prompt_bytes,
                output_ceiling: found.ceiling,
                problem: None,
            },
            Err(_) => RequestJson::unreadable(BodyProblem::NotJson, pointers),
        }
    }

    /// A body that could not be read: every pointer absent.
    pub fn unreadable(problem: BodyProblem, pointers: &[String]) -> RequestJson {
        RequestJson {
            values: pointers.iter().map(|p| (p.clone(), None)).collect(),
            problem: Some(problem),
            ..RequestJson::default()
        }
    }

    /// The value at `pointer` (a string as it is, a number or boolean as written); `None`
    /// when absent, null, an object or a list, or not asked for.
    pub fn value(&self, pointer: &str) -> Option<&str> {
        if pointer == MODEL {
            return self.model();
        }
        self.values
            .iter()
            .find(|(p, _)| p == pointer)
            .and_then(|(_, value)| value.as_deref())
    }

    /// The request's `model`, if a string.
    pub fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    /// Bytes of prompt text.
    pub fn prompt_bytes(&self) -> u64 {
        self.prompt_bytes
    }

    /// The prompt's tokens as estimated: its text's bytes ÷ 4, rounded up.
    pub fn prompt_tokens(&self) -> u64 {
        self.prompt_bytes.div_ceil(4)
    }

    /// The most tokens the request lets the model generate, if it says.
    pub fn output_ceiling(&self) -> Option<u64> {
        self.output_ceiling
    }

    /// Why the body could not be read, if it could not.
    pub fn problem(&self) -> Option<BodyProblem> {
        self.problem
    }
}

/// `io::Read` over a body's pieces in order.
struct Chunks<'a> {
    chunks: &'a [bytes::Bytes],
    at: usize,
    offset: usize,
}

impl std::io::Read for Chunks<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while let Some(chunk) = self.chunks.get(self.at) {
            let rest = &chunk[self.offset..];
            if rest.is_empty() {
                self.at += 1;
                self.offset = 0;
                continue;
            }
            let n = rest.len().min(out.len());
            out[..n].copy_from_slice(&rest[..n]);
            self.offset += n;
            return Ok(n);
        }
        Ok(0)
    }
}

/// What the walk has found so far.
#[derive(Default)]
struct Found<'p> {
    wanted: &'p [String],
    values: Vec<(String, Option<String>)>,
    model: Option<String>,
    prompt_bytes: u64,
    ceiling: Option<u64>,
}

impl Found<'_> {
    /// Whether anything is wanted at `path` or below it.
    fn wants_below(&self, path: &str) -> bool {
        let under = |pointer: &str| {
            pointer.len() > path.len()
                && pointer.starts_with(path)
                && pointer.as_bytes()[path.len()] == b'/'
        };
        self.wanted.iter().any(|p| under(p)) || CEILINGS.iter().any(|p| under(p)) || under(MODEL)
    }

    /// Forgets what was found at `path` and below, which a key met again replaces: with a
    /// key written twice the last one counts, as for the JSON parsers upstreams use (a
    /// `model` or a pointer's value read from the first would not be what the upstream
    /// reads). The output ceiling and the prompt's length keep the larger reading.
    fn forget_at(&mut self, path: &str) {
        if path == MODEL {
            self.model = None;
        }
        for (pointer, slot) in &mut self.values {
            if slot.is_some()
                && pointer.starts_with(path)
                && matches!(pointer.as_bytes().get(path.len()), None | Some(b'/'))
            {
                *slot = None;
            }
        }
    }

    /// Keeps a scalar found at `path`.
    fn scalar(&mut self, path: &str, value: Scalar<'_>) {
        if path == MODEL
            && let Scalar::Str(text) = value
        {
            self.model = Some(text.to_owned());
        }
        if CEILINGS.contains(&path)
            && let Scalar::Unsigned(n) = value
        {
            self.ceiling = Some(self.ceiling.map_or(n, |c| c.max(n)));
        }
        for (pointer, slot) in &mut self.values {
            if pointer == path {
                *slot = Some(match value {
                    Scalar::Str(text) => text.to_owned(),
                    Scalar::Unsigned(n) => n.to_string(),
                    Scalar::Signed(n) => n.to_string(),
                    Scalar::Float(x) => x.to_string(),
                    Scalar::Bool(b) => b.to_string(),
                });
            }
        }
    }
}

#[derive(Clone, Copy)]
enum Scalar<'a> {
    Str(&'a str),
    Unsigned(u64),
    Signed(i64),
    Float(f64),
    Bool(bool),
}

/// Where the walk is in the prompt's text.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Text {
    /// Outside the prompt fields.
    Off,
    /// A prompt field itself, an element of its list, or a `content`/`text` value: its
    /// strings are text.
    Counted,
    /// Deeper inside a prompt field: only `content` and `text` values are text.
    Inside,
}

/// One value of the body, walked: what was found so far, the JSON pointer of this value
/// (grown and cut back as the walk goes down and up), and where it is in the prompt.
struct Walk<'a, 'p> {
    found: &'a mut Found<'p>,
    path: &'a mut String,
    text: Text,
}

impl<'de> DeserializeSeed<'de> for Walk<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        let path: &str = self.path;
        if self.text == Text::Off && !path.is_empty() && !self.found.wants_below(path) {
            // Nothing wanted here or below but perhaps this value itself.
            let wanted = path == MODEL
                || CEILINGS.contains(&path)
                || self.found.wanted.iter().any(|p| p == path);
            if !wanted {
                return IgnoredAny::deserialize(deserializer).map(|_| ());
            }
        }
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<(), E> {
        if self.text == Text::Counted {
            self.found.prompt_bytes += text.len() as u64;
        }
        self.found.scalar(self.path, Scalar::Str(text));
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<(), E> {
        self.found.scalar(self.path, Scalar::Unsigned(n));
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<(), E> {
        self.found.scalar(self.path, Scalar::Signed(n));
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, x: f64) -> Result<(), E> {
        self.found.scalar(self.path, Scalar::Float(x));
        Ok(())
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<(), E> {
        self.found.scalar(self.path, Scalar::Bool(b));
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Walk { found, path, text } = self;
        let base = path.len();
        let mut index = 0usize;
        loop {
            path.truncate(base);
            path.push('/');
            path.push_str(itoa::Buffer::new().format(index));
            let element = Walk {
                found: &mut *found,
                path: &mut *path,
                text,
            };
            if seq.next_element_seed(element)?.is_none() {
                break;
            }
            index += 1;
        }
        path.truncate(base);
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Walk { found, path, text } = self;
        let base = path.len();
        let top = base == 0;
        while let Some(key) = map.next_key_seed(KeySeed)? {
            path.truncate(base);
            path.push('/');
            push_escaped(path, &key);
            found.forget_at(path);
            let child = match text {
                Text::Off if top && PROMPT_FIELDS.contains(&key.as_ref()) => Text::Counted,
                Text::Off => Text::Off,
                _ if key == "content" || key == "text" => Text::Counted,
                _ => Text::Inside,
            };
            map.next_value_seed(Walk {
                found: &mut *found,
                path: &mut *path,
                text: child,
            })?;
        }
        path.truncate(base);
        Ok(())
    }
}

/// Appends `key` to a JSON pointer, escaped (`~` as `~0`, `/` as `~1`).
fn push_escaped(path: &mut String, key: &str) {
    for c in key.chars() {
        match c {
            '~' => path.push_str("~0"),
            '/' => path.push_str("~1"),
            c => path.push(c),
        }
    }
}

/// An object's key, borrowed from the body when it has no escapes.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Cow<'de, str>, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_borrowed_str<E: de::Error>(self, key: &'de str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Borrowed(key))
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(key.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_dialect_s_prompt_text_is_counted_and_nothing_else() {
        let pointers = ["/model".to_owned(), "/metadata/user~1id".to_owned()];
        let openai = br#"{"model":"gpt-4o","max_completion_tokens":100,"metadata":{"user/id":"u-7"},
            "messages":[{"role":"user","content":"abcd"},{"role":"user","content":[{"type":"text","text":"efgh"},{"type":"image_url","image_url":{"url":"data:xxxxxxxx"}}]}],
            "tools":[{"type":"function","function":{"description":"not the prompt"}}]}"#;
        let anthropic =
            br#"{"model":"claude-x","max_tokens":100,"system":[{"type":"text","text":"abcd"}],
            "messages":[{"role":"user","content":[{"type":"text","text":"efgh"}]}]}"#;
        let responses = br#"{"model":"gpt-4o","max_output_tokens":100,"instructions":"abcd","input":[{"role":"user","content":[{"type":"input_text","text":"efgh"}]}]}"#;
        let gemini = br#"{"systemInstruction":{"parts":[{"text":"abcd"}]},"contents":[{"role":"user","parts":[{"text":"efgh"}]}],"generationConfig":{"maxOutputTokens":100}}"#;
        for body in [&openai[..], anthropic, responses, gemini] {
            let json = RequestJson::read(body, &pointers);
            assert_eq!(json.prompt_bytes(), 8, "{}", String::from_utf8_lossy(body));
            assert_eq!(json.prompt_tokens(), 2);
            assert_eq!(json.output_ceiling(), Some(100));
            assert_eq!(json.problem(), None);
        }
        let json = RequestJson::read(openai, &pointers);
        assert_eq!(json.value("/metadata/user~1id"), Some("u-7"));
        assert_eq!(json.value("/model"), Some("gpt-4o"));
        let split: Vec<bytes::Bytes> = openai
            .chunks(7)
            .map(bytes::Bytes::copy_from_slice)
            .collect();
        assert_eq!(RequestJson::read_chunks(&split, &pointers), json);
        assert_eq!(
            RequestJson::read(br#"{"prompt":"abcdefghi"}"#, &[]).prompt_tokens(),
            3
        );
    }

    /// Found by the `request_body` fuzz target: with a key written twice, the first
    /// reading was kept where the upstream's parser (Python's, Go's, JavaScript's) takes
    /// the last — a `model` or a key part the upstream never sees.
    #[test]
    fn a_key_written_twice_counts_as_the_upstream_reads_it_the_last_time() {
        let pointers = ["/user/id".to_owned(), "/team".to_owned()];
        let body = br#"{"model":"cheap","user":{"id":"victim"},"team":"a",
            "model":"dear","user":{"name":"x"},"team":{"not":"a scalar"}}"#;
        let json = RequestJson::read(body, &pointers);
        assert_eq!(json.model(), Some("dear"));
        assert_eq!(json.value("/user/id"), None);
        assert_eq!(json.value("/team"), None);
        let json = RequestJson::read(br#"{"team":"a","team":"b"}"#, &pointers);
        assert_eq!(json.value("/team"), Some("b"));
    }

    #[test]
    fn bad_bodies_read_as_absent() {
        let pointers = ["/model".to_owned()];
        for body in [&b"model=gpt-4o"[..], b"{\"model\":", b"", b"{} {}"] {
            let json = RequestJson::read(body, &pointers);
            assert_eq!(json.problem(), Some(BodyProblem::NotJson));
            assert_eq!(json.value("/model"), None);
        }
        let json = RequestJson::read(br#"{"model":["gpt-4o"],"max_tokens":-5}"#, &pointers);
        assert_eq!(json.model(), None, "a model that is not a string");
        assert_eq!(json.output_ceiling(), None);
        // Deep nesting is skipped without recursion where nothing is wanted, and refused
        // (serde_json's limit of 128 levels) where the walk goes down.
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert_eq!(RequestJson::read(deep.as_bytes(), &[]).problem(), None);
        let deep = format!("{{\"messages\":{}{}}}", "[".repeat(200), "]".repeat(200));
        assert_eq!(
            RequestJson::read(deep.as_bytes(), &[]).problem(),
            Some(BodyProblem::NotJson)
        );
        let numbers = RequestJson::read(
            br#"{"n":12,"b":true,"x":1.5}"#,
            &["/n".into(), "/b".into(), "/x".into()],
        );
        assert_eq!(
            (
                numbers.value("/n"),
                numbers.value("/b"),
                numbers.value("/x")
            ),
            (Some("12"), Some("true"), Some("1.5"))
        );
    }
}
