//! Token usage as the three big LLM APIs report it (`cost = { from = "usage" }`), read from
//! a JSON body or from each server-sent event, and normalised to one meaning:
//!
//! | API | input (not cached) | cached | output |
//! |---|---|---|---|
//! | OpenAI Chat Completions | `usage.prompt_tokens` − cached | `usage.prompt_tokens_details.cached_tokens` | `usage.completion_tokens` |
//! | OpenAI Responses | `usage.input_tokens` − cached | `usage.input_tokens_details.cached_tokens` | `usage.output_tokens` |
//! | Anthropic Messages | `usage.input_tokens` + `cache_creation_input_tokens` | `usage.cache_read_input_tokens` | `usage.output_tokens` |
//! | Gemini | `usageMetadata.promptTokenCount` − cached | `usageMetadata.cachedContentTokenCount` | `candidatesTokenCount` + `thoughtsTokenCount` |
//!
//! The dialect is told from the body's shape, never configured: `usageMetadata` is
//! Gemini's; a `usage` with `prompt_tokens` or `completion_tokens` is Chat Completions'; one
//! with `input_tokens_details` the Responses API's; otherwise `input_tokens` and
//! `output_tokens` are read as Anthropic's (without cache fields the two agree). Streams
//! nest it: Anthropic's `message_start` carries `message.usage` (the input) and each
//! `message_delta` a `usage` (the output so far); the Responses API's `response.completed`
//! carries `response.usage`. Each event's counts replace the ones read before, field by
//! field, so a stream's input and its final output are both kept.
//!
//! A count must be a whole number from 0 to 2^40; anything else is a fault, and the
//! reservation stands.

use serde_json::Value;

use crate::config::Usage;
use crate::traffic::Fault;

/// The largest count believed (about a trillion tokens).
pub(crate) const MAX_COUNT: u64 = 1 << 40;

/// Counts read so far: each is known or not yet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct UsageSoFar {
    /// The model the response names (`model`, `message.model`, `response.model`, Gemini's
    /// `modelVersion`), the last one read.
    model: Option<Box<str>>,
    input: Option<u64>,
    cached: Option<u64>,
    output: Option<u64>,
    /// Whether any usage was seen.
    seen: bool,
    /// An Anthropic stream began (`message_start`) and its final `message_delta` has not
    /// come: the output is not known yet.
    awaiting_delta: bool,
}

impl UsageSoFar {
    /// Reads `document` (a whole body, or one event's data) and keeps what it says.
    pub(crate) fn read(&mut self, document: &Value) -> Result<(), Fault> {
        if let Value::Array(chunks) = document {
            // Gemini's streamGenerateContent without `alt=sse`: an array of chunks.
            for chunk in chunks {
                self.read(chunk)?;
            }
            return Ok(());
        }
        let model = [
            document.get("model"),
            document.get("message").and_then(|m| m.get("model")),
            document.get("response").and_then(|r| r.get("model")),
            document.get("modelVersion"),
        ]
        .into_iter()
        .flatten()
        .find_map(Value::as_str);
        if let Some(model) = model {
            self.model = Some(model.into());
        }
        let Some(found) = usage_of(document)? else {
            return Ok(());
        };
        match document.get("type").and_then(Value::as_str) {
            Some("message_start") => self.awaiting_delta = true,
            Some("message_delta") => self.awaiting_delta = false,
            _ => {}
        }
        self.seen = true;
        self.input = found.input.or(self.input);
        self.cached = found.cached.or(self.cached);
        self.output = found.output.or(self.output);
        Ok(())
    }

    /// The counts, the body having ended: `None` when no usage was seen, a fault when it
    /// was seen without both its input and its output.
    pub(crate) fn finish(self) -> Option<Result<Usage, Fault>> {
        if !self.seen {
            return None;
        }
        Some(match (self.input, self.output) {
            (Some(input), Some(output)) if !self.awaiting_delta => Ok(Usage {
                input,
                cached: self.cached.unwrap_or(0),
                output,
            }),
            _ => Err(Fault::IncompleteUsage),
        })
    }

    /// The model the response named, if it did.
    pub(crate) fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }
}

/// The usage one document states, normalised; `None` when it states none.
fn usage_of(document: &Value) -> Result<Option<UsageSoFar>, Fault> {
    if let Some(gemini) = document.get("usageMetadata").filter(|v| v.is_object()) {
        let prompt = count(gemini, "promptTokenCount")?;
        let cached = count(gemini, "cachedContentTokenCount")?;
        let candidates = count(gemini, "candidatesTokenCount")?;
        let thoughts = count(gemini, "thoughtsTokenCount")?;
        let output = match (candidates, thoughts) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
        };
        return uncached(prompt, cached, output).map(Some);
    }
    // Streams nest the object: Anthropic's message_start, the Responses API's events.
    let usage = [
        document.get("usage"),
        document.get("message").and_then(|m| m.get("usage")),
        document.get("response").and_then(|r| r.get("usage")),
    ]
    .into_iter()
    .flatten()
    .find(|usage| usage.is_object());
    let Some(usage) = usage else {
        return Ok(None);
    };
    if usage.get("prompt_tokens").is_some() || usage.get("completion_tokens").is_some() {
        let prompt = count(usage, "prompt_tokens")?;
        let cached = match usage.get("prompt_tokens_details") {
            Some(details) if details.is_object() => count(details, "cached_tokens")?,
            _ => None,
        };
        let output = count(usage, "completion_tokens")?;
        return uncached(prompt, cached, output).map(Some);
    }
    if let Some(details) = usage.get("input_tokens_details") {
        let prompt = count(usage, "input_tokens")?;
        let cached = if details.is_object() {
            count(details, "cached_tokens")?
        } else {
            None
        };
        let output = count(usage, "output_tokens")?;
        return uncached(prompt, cached, output).map(Some);
    }
    // Anthropic: input_tokens already leaves out what was read from the cache; what was
    // written to it was input too.
    let input = count(usage, "input_tokens")?;
    let written = count(usage, "cache_creation_input_tokens")?;
    let input = match (input, written) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    };
    Ok(Some(UsageSoFar {
        model: None,
        input,
        cached: count(usage, "cache_read_input_tokens")?,
        output: count(usage, "output_tokens")?,
        seen: true,
        awaiting_delta: false,
    }))
}

/// Counts whose prompt figure includes its cached part (OpenAI, Gemini).
fn uncached(
    prompt: Option<u64>,
    cached: Option<u64>,
    output: Option<u64>,
) -> Result<UsageSoFar, Fault> {
    let input = match (prompt, cached) {
        (Some(prompt), Some(cached)) => {
            Some(prompt.checked_sub(cached).ok_or(Fault::IncompleteUsage)?)
        }
        (prompt, _) => prompt,
    };
    Ok(UsageSoFar {
        model: None,
        input,
        // A prompt without a cached figure had none cached.
        cached: cached.or(prompt.map(|_| 0)),
        output,
        seen: true,
        awaiting_delta: false,
    })
}

/// The count at `object[field]`: absent or null is `None`; a count must be a whole
/// number from 0 to [`MAX_COUNT`].
fn count(object: &Value, field: &str) -> Result<Option<u64>, Fault> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(number)) => match (number.as_u64(), number.as_f64()) {
            (Some(n), _) if n <= MAX_COUNT => Ok(Some(n)),
            (Some(_), _) => Err(Fault::AboveMax),
            (None, Some(x)) if x < 0.0 => Err(Fault::Negative),
            _ => Err(Fault::NotAWholeNumber),
        },
        Some(_) => Err(Fault::NotANumber),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(documents: &[&str]) -> Option<Result<Usage, Fault>> {
        let mut so_far = UsageSoFar::default();
        for document in documents {
            let document: Value = serde_json::from_str(document).unwrap();
            if let Err(fault) = so_far.read(&document) {
                return Some(Err(fault));
            }
        }
        so_far.finish()
    }

    fn tokens(input: u64, cached: u64, output: u64) -> Option<Result<Usage, Fault>> {
        Some(Ok(Usage {
            input,
            cached,
            output,
        }))
    }

    #[test]
    fn each_dialect_means_the_same_counts() {
        let chat = r#"{"object":"chat.completion","usage":{"prompt_tokens":1000,"completion_tokens":50,"total_tokens":1050,"prompt_tokens_details":{"cached_tokens":800}}}"#;
        let responses = r#"{"object":"response","usage":{"input_tokens":1000,"input_tokens_details":{"cached_tokens":800},"output_tokens":50,"total_tokens":1050}}"#;
        let anthropic = r#"{"type":"message","usage":{"input_tokens":200,"cache_read_input_tokens":800,"cache_creation_input_tokens":0,"output_tokens":50}}"#;
        let gemini = r#"{"candidates":[],"usageMetadata":{"promptTokenCount":1000,"cachedContentTokenCount":800,"candidatesTokenCount":50,"totalTokenCount":1050}}"#;
        for body in [chat, responses, anthropic, gemini] {
            assert_eq!(usage(&[body]), tokens(200, 800, 50), "{body}");
        }
        // Without cache fields, every dialect's input is all input.
        assert_eq!(
            usage(&[r#"{"usage":{"prompt_tokens":7,"completion_tokens":3}}"#]),
            tokens(7, 0, 3)
        );
        assert_eq!(
            usage(&[
                r#"{"usageMetadata":{"promptTokenCount":7,"candidatesTokenCount":3,"thoughtsTokenCount":2}}"#
            ]),
            tokens(7, 0, 5),
            "Gemini's thinking is output"
        );
    }

    #[test]
    fn streams_keep_the_input_of_one_event_and_the_output_of_another() {
        let anthropic = [
            r#"{"type":"message_start","message":{"id":"m","usage":{"input_tokens":25,"cache_read_input_tokens":100,"output_tokens":1}}}"#,
            r#"{"type":"content_block_delta","delta":{"text":"Hi"}}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":15}}"#,
        ];
        assert_eq!(usage(&anthropic), tokens(25, 100, 15));
        let chat = [
            r#"{"choices":[{"delta":{"content":"Hi"}}],"usage":null}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":4}}"#,
        ];
        assert_eq!(usage(&chat), tokens(9, 0, 4));
        let responses = [
            r#"{"type":"response.output_text.delta","delta":"Hi"}"#,
            r#"{"type":"response.completed","response":{"usage":{"input_tokens":12,"input_tokens_details":{"cached_tokens":2},"output_tokens":6}}}"#,
        ];
        assert_eq!(usage(&responses), tokens(10, 2, 6));
        let gemini_array = r#"[{"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":1}},{"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":8}}]"#;
        assert_eq!(usage(&[gemini_array]), tokens(5, 0, 8));
    }

    #[test]
    fn bad_or_partial_usage_is_a_fault_and_none_is_none() {
        assert_eq!(usage(&[r#"{"id":"x","choices":[]}"#]), None);
        assert_eq!(
            usage(&[r#"{"type":"message_start","message":{"usage":{"input_tokens":25}}}"#]),
            Some(Err(Fault::IncompleteUsage)),
            "a stream cut off before its final output"
        );
        let cases = [
            (
                r#"{"usage":{"prompt_tokens":-1,"completion_tokens":2}}"#,
                Fault::Negative,
            ),
            (
                r#"{"usage":{"prompt_tokens":1.5,"completion_tokens":2}}"#,
                Fault::NotAWholeNumber,
            ),
            (
                r#"{"usage":{"prompt_tokens":"7","completion_tokens":2}}"#,
                Fault::NotANumber,
            ),
            (
                r#"{"usage":{"prompt_tokens":2199023255553,"completion_tokens":2}}"#,
                Fault::AboveMax,
            ),
            (
                r#"{"usage":{"prompt_tokens":3,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":9}}}"#,
                Fault::IncompleteUsage,
            ),
        ];
        for (body, fault) in cases {
            assert_eq!(usage(&[body]), Some(Err(fault)), "{body}");
        }
    }
}
