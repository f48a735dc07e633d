//! Snapshots of the in-memory store: a restart must not hand everyone a fresh daily budget.
//!
//! With `[store] snapshot = "path"`, the buckets are written every `snapshot_interval` and
//! when the limiter is told to ([`Limits::save_snapshot`](crate::Limits::save_snapshot);
//! the gateway does it on graceful shutdown), and read back at start. Bucket state is
//! absolute (nanoseconds since the UNIX epoch), so the time spent down refills exactly as
//! if the process had stayed up.
//!
//! The format is text, one bucket per line, versioned and framed:
//!
//! ```text
//! tollgate-snapshot 1 <written-at-unix-nanos> <buckets>
//! <rule-key> <client> <layout> <word> <word> ...
//! end <buckets>
//! ```
//!
//! Rule keys are percent-encoded (the root rule is `%2F`); the client is `ip:<address>`,
//! `key:<percent-encoded>`, `unknown` or `global`; the layout is `discrete` for a
//! caller-defined `RL.*` bucket (six words; its rule key is `/rl`, which no rule can have),
//! or `one` (one GCRA quota:
//! TAT, interval) or `many` (three runs of words, as the store keeps them). Files are
//! written to a temporary name, synced and renamed into place, so a crash leaves the old
//! snapshot or the new one, never half of one. A file that is missing, truncated, of
//! another version or malformed in any line is logged and ignored whole — never half-loaded
//! and never fatal. Buckets of rules that no longer exist are skipped.

use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use percent_encoding::{AsciiSet, CONTROLS, percent_decode_str, utf8_percent_encode};

use crate::clock::Timestamp;
use crate::key::Client;

const MAGIC: &str = "tollgate-snapshot";
const VERSION: u32 = 1;

/// Characters encoded in rule keys and client keys: anything that would split a field.
const FIELD: &AsciiSet = &CONTROLS.add(b' ').add(b'%').add(b'/');

/// Why a snapshot could not be written or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// Reading or writing the file failed.
    #[error("snapshot {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a complete snapshot this version can read.
    #[error("snapshot {}: line {line}: {reason}", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// The 1-based line.
        line: usize,
        /// What is wrong.
        reason: String,
    },
}

/// One bucket as a snapshot holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    /// The rule's normalised key.
    pub(crate) rule: String,
    /// `None` for a global bucket.
    pub(crate) client: Option<Client<'static>>,
    pub(crate) layout: Layout,
    pub(crate) words: Vec<u64>,
}

/// How a bucket's words are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Layout {
    /// `one`: one GCRA quota, `[tat, interval]`.
    One,
    /// `many`: three runs of `n` words, as the store keeps them.
    Many,
    /// `discrete`: a caller-defined (`RL.*`) bucket: tokens, refill mark, session start,
    /// max, refill, interval.
    Discrete,
    /// `log`: a sliding log: `n`, its `n` periods, then its timestamps oldest first.
    Log,
    /// `warm`: a warming bucket: TAT, stored permits (`f64` bits), interval, warm-up.
    Warm,
    /// `ring`: a sliding window in sub-windows: `n`, `n` pairs (period, resolution), then
    /// each quota's ring (newest sub-window, `k + 1` counts).
    Ring,
}

impl Layout {
    /// The layout's one-byte code, for the disk store's values.
    pub(crate) fn code(self) -> u8 {
        match self {
            Layout::One => 1,
            Layout::Many => 2,
            Layout::Discrete => 3,
            Layout::Log => 4,
            Layout::Warm => 5,
            Layout::Ring => 6,
        }
    }

    /// The layout a [`code`](Self::code) names, if any.
    pub(crate) fn from_code(code: u8) -> Option<Layout> {
        Some(match code {
            1 => Layout::One,
            2 => Layout::Many,
            3 => Layout::Discrete,
            4 => Layout::Log,
            5 => Layout::Warm,
            6 => Layout::Ring,
            _ => return None,
        })
    }

    /// Whether `words` are as many as this layout has.
    pub(crate) fn holds(self, words: &[u64]) -> bool {
        self.fits(words)
    }

    fn name(self) -> &'static str {
        match self {
            Layout::One => "one",
            Layout::Many => "many",
            Layout::Discrete => "discrete",
            Layout::Log => "log",
            Layout::Warm => "warm",
            Layout::Ring => "ring",
        }
    }

    fn fits(self, words: &[u64]) -> bool {
        match self {
            Layout::One => words.len() == 2,
            Layout::Many => !words.is_empty() && words.len().is_multiple_of(3),
            Layout::Discrete => words.len() == 6,
            Layout::Log => words
                .first()
                .and_then(|&n| usize::try_from(n).ok())
                .is_some_and(|n| words.len() > n),
            Layout::Warm => words.len() == 4,
            Layout::Ring => words
                .first()
                .and_then(|&n| usize::try_from(n).ok())
                .and_then(|n| n.checked_mul(2))
                .is_some_and(|pairs| pairs > 0 && words.len() > pairs + 1),
        }
    }
}

/// Writes `records` to `path` atomically (temporary file, sync, rename).
pub(crate) fn write(path: &Path, now: Timestamp, records: &[Record]) -> Result<(), SnapshotError> {
    let io = |source| SnapshotError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut text = String::with_capacity(64 + records.len() * 48);
    let _ = writeln!(
        text,
        "{MAGIC} {VERSION} {} {}",
        now.as_unix_nanos(),
        records.len()
    );
    for record in records {
        let rule = if record.rule.is_empty() {
            "%2F".to_owned()
        } else {
            utf8_percent_encode(&record.rule, FIELD).to_string()
        };
        let client = match &record.client {
            None => "global".to_owned(),
            Some(Client::Ip(address)) => format!("ip:{address}"),
            Some(Client::Key(key)) => format!("key:{}", utf8_percent_encode(key, FIELD)),
            Some(_) => "unknown".to_owned(),
        };
        let layout = record.layout.name();
        let _ = write!(text, "{rule} {client} {layout}");
        for word in &record.words {
            let _ = write!(text, " {word}");
        }
        text.push('\n');
    }
    let _ = writeln!(text, "end {}", records.len());

    // A crash leaves the old snapshot or the new one; a disk that fills half-way through
    // leaves the previous snapshot, never touched, as the one a restart reads.
    crate::atomic_file::write(path, text.as_bytes()).map_err(io)
}

/// Reads a whole snapshot, or nothing.
pub(crate) fn read(path: &Path) -> Result<Vec<Record>, SnapshotError> {
    let text = std::fs::read_to_string(path).map_err(|source| SnapshotError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let malformed = |line: usize, reason: &str| SnapshotError::Malformed {
        path: path.to_path_buf(),
        line,
        reason: reason.to_owned(),
    };
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
    let (_, header) = lines.next().ok_or_else(|| malformed(1, "empty file"))?;
    let fields: Vec<&str> = header.split(' ').collect();
    let [magic, version, _written, count] = fields[..] else {
        return Err(malformed(1, "not a tollgate snapshot header"));
    };
    if magic != MAGIC {
        return Err(malformed(1, "not a tollgate snapshot"));
    }
    if version != VERSION.to_string() {
        return Err(malformed(
            1,
            &format!("version {version}, this build reads version {VERSION}"),
        ));
    }
    let count: usize = count
        .parse()
        .map_err(|_| malformed(1, "bad bucket count"))?;
    let mut records = Vec::with_capacity(count.min(1 << 24));
    for (number, line) in lines {
        if let Some(end) = line.strip_prefix("end ") {
            if end.parse::<usize>().ok() != Some(count) || records.len() != count {
                return Err(malformed(number, "bucket count does not match the header"));
            }
            return Ok(records);
        }
        records.push(parse_record(line).ok_or_else(|| malformed(number, "malformed bucket"))?);
    }
    Err(malformed(text.lines().count(), "truncated: no end line"))
}

fn parse_record(line: &str) -> Option<Record> {
    let mut fields = line.split(' ');
    let rule = percent_decode_str(fields.next()?).decode_utf8().ok()?;
    let rule = if rule == "/" {
        String::new()
    } else {
        rule.into_owned()
    };
    let client = match fields.next()? {
        "global" => None,
        "unknown" => Some(Client::Unknown),
        other => {
            if let Some(address) = other.strip_prefix("ip:") {
                Some(Client::Ip(address.parse::<IpAddr>().ok()?))
            } else {
                let key = percent_decode_str(other.strip_prefix("key:")?)
                    .decode_utf8()
                    .ok()?;
                Some(Client::Key(key.into_owned().into()))
            }
        }
    };
    let layout = match fields.next()? {
        "one" => Layout::One,
        "many" => Layout::Many,
        "discrete" => Layout::Discrete,
        "log" => Layout::Log,
        "warm" => Layout::Warm,
        "ring" => Layout::Ring,
        _ => return None,
    };
    let words: Vec<u64> = fields.map(|w| w.parse().ok()).collect::<Option<_>>()?;
    layout.fits(&words).then_some(Record {
        rule,
        client,
        layout,
        words,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Record> {
        vec![
            Record {
                rule: "".into(),
                client: Some(Client::Ip("192.0.2.1".parse().unwrap())),
                layout: Layout::One,
                words: vec![5, 6],
            },
            Record {
                rule: "api/a b".into(),
                client: Some(Client::Key("k/1%".to_owned().into())),
                layout: Layout::Many,
                words: vec![1, 2, 3],
            },
            Record {
                rule: "export".into(),
                client: None,
                layout: Layout::One,
                words: vec![7, 8],
            },
            Record {
                rule: "x".into(),
                client: Some(Client::Unknown),
                layout: Layout::One,
                words: vec![9, 10],
            },
            Record {
                rule: "/rl".into(),
                client: Some(Client::Key("2:2:60000:TwoPerMin".to_owned().into())),
                layout: Layout::Discrete,
                words: vec![1, 2, 3, 2, 2, 60_000_000_000],
            },
        ]
    }

    #[test]
    fn round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("buckets.snapshot");
        write(&path, Timestamp::from_unix_nanos(42), &sample()).unwrap();
        assert_eq!(read(&path).unwrap(), sample());
        assert!(!dir.path().join("buckets.snapshot.tmp").exists());
    }

    #[test]
    fn anything_less_than_a_whole_snapshot_is_refused_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("buckets.snapshot");
        write(&path, Timestamp::from_unix_nanos(42), &sample()).unwrap();
        let whole = std::fs::read_to_string(&path).unwrap();
        let cases = [
            (
                whole.lines().take(3).map(|l| format!("{l}\n")).collect(),
                "truncated",
            ),
            (whole[..whole.len() / 2].to_owned(), "malformed"),
            (whole.replace("end 5", "end 4"), "does not match"),
            (whole.replace(" 1 42 ", " 2 42 "), "version 2"),
            (
                whole.replace("ip:192.0.2.1", "ip:nonsense"),
                "line 2: malformed",
            ),
            (whole.replace("many 1 2 3", "many 1 2"), "line 3: malformed"),
            (String::new(), "empty"),
            ("GIF89a".to_owned(), "not a tollgate snapshot"),
        ];
        for (text, expected) in cases {
            std::fs::write(&path, &text).unwrap();
            let error = read(&path).unwrap_err().to_string();
            assert!(error.contains(expected), "{text:?} gave {error}");
        }
        assert!(matches!(
            read(&dir.path().join("missing")),
            Err(SnapshotError::Io { .. })
        ));
    }
}
