//! Fetching a config document over HTTP or HTTPS (feature `remote`): a conditional `GET`
//! (`If-None-Match` / `If-Modified-Since` from the last good fetch) with bounded time,
//! bounded size and bounded redirects, over rustls (no system OpenSSL).
//!
//! Credentials for private repositories are headers whose values come from environment
//! variables (`[reload.headers]`); they are sent only to the host they are configured for,
//! never follow a redirect, and never appear in an error, a log line or the cache.

use std::time::Duration;

use super::{RemoteUrl, Validator};
use crate::config::RemoteHeader;

/// How long connecting may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a whole fetch may take, body included.
pub(crate) const FETCH_TIMEOUT: Duration = Duration::from_secs(30);
/// Redirects followed for a request without credentials.
pub(crate) const MAX_REDIRECTS: u32 = 5;

/// What a fetch brought back.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Fetched {
    /// Unchanged since the validator that was sent (`304 Not Modified`).
    NotModified,
    /// The document, and what tells this version from the next.
    Document {
        text: String,
        validator: Option<Validator>,
    },
}

/// Fetches config documents; cheap to share, connections are pooled.
pub(crate) struct Fetcher {
    #[cfg(feature = "remote")]
    plain: ureq::Agent,
    /// For requests carrying credentials: no redirects, so nothing leaves the host the
    /// credentials were configured for.
    #[cfg(feature = "remote")]
    credentialed: ureq::Agent,
}

impl std::fmt::Debug for Fetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fetcher").finish_non_exhaustive()
    }
}

impl Fetcher {
    #[cfg(feature = "remote")]
    pub(crate) fn new() -> Fetcher {
        let agent = |redirects: u32| -> ureq::Agent {
            ureq::Agent::config_builder()
                .timeout_connect(Some(CONNECT_TIMEOUT))
                .timeout_global(Some(FETCH_TIMEOUT))
                .max_redirects(redirects)
                .max_redirects_will_error(false)
                .http_status_as_error(false)
                .user_agent(concat!("tollgate/", env!("CARGO_PKG_VERSION")))
                .build()
                .into()
        };
        Fetcher {
            plain: agent(MAX_REDIRECTS),
            credentialed: agent(0),
        }
    }

    #[cfg(not(feature = "remote"))]
    pub(crate) fn new() -> Fetcher {
        Fetcher {}
    }

    /// `GET url`, conditional on `validator`, with `headers` whose values are read from the
    /// environment now. Errors are one line, fit for a log and `/config`, never holding a
    /// header's value. Without the `remote` feature there is nothing to fetch with: it says
    /// so.
    pub(crate) fn fetch(
        &self,
        url: &RemoteUrl,
        validator: Option<&Validator>,
        headers: &[RemoteHeader],
    ) -> Result<Fetched, String> {
        #[cfg(feature = "remote")]
        return self.get(url, validator, headers);
        #[cfg(not(feature = "remote"))]
        {
            let _ = (url, validator, headers);
            Err("tollgate was built without its `remote` feature, which URL sources need".into())
        }
    }

    #[cfg(feature = "remote")]
    fn get(
        &self,
        url: &RemoteUrl,
        validator: Option<&Validator>,
        headers: &[RemoteHeader],
    ) -> Result<Fetched, String> {
        let credentials: Vec<&RemoteHeader> = headers
            .iter()
            .filter(|header| header.host == url.host())
            .collect();
        let agent_carries_credentials = !credentials.is_empty();
        let agent = if agent_carries_credentials {
            &self.credentialed
        } else {
            &self.plain
        };
        let mut request = agent.get(url.as_str());
        match validator {
            Some(Validator::ETag(tag)) => request = request.header("if-none-match", tag),
            Some(Validator::LastModified(date)) => {
                request = request.header("if-modified-since", date);
            }
            _ => {}
        }
        for header in credentials {
            let value = std::env::var(&header.env).map_err(|_| {
                format!(
                    "environment variable {} (for the {} header) is not set",
                    header.env, header.name
                )
            })?;
            let mut value = http::HeaderValue::from_str(value.trim()).map_err(|_| {
                format!(
                    "environment variable {} does not hold a valid {} header value",
                    header.env, header.name
                )
            })?;
            value.set_sensitive(true);
            request = request.header(header.name.clone(), value);
        }
        let mut response = request.call().map_err(|error| describe(&error))?;
        let status = response.status();
        if status == http::StatusCode::NOT_MODIFIED {
            return Ok(Fetched::NotModified);
        }
        if status.is_redirection() {
            let to = response
                .headers()
                .get(http::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("nowhere");
            let why = if agent_carries_credentials {
                "requests carrying [reload.headers] credentials follow no redirect".to_owned()
            } else {
                format!("more than {MAX_REDIRECTS} redirects")
            };
            return Err(format!(
                "HTTP {status}, redirected to {to}: {why}; use the final URL"
            ));
        }
        if !status.is_success() {
            return Err(format!("HTTP {status}"));
        }
        let header = |name: http::header::HeaderName| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let validator = header(http::header::ETAG)
            .map(Validator::ETag)
            .or_else(|| header(http::header::LAST_MODIFIED).map(Validator::LastModified));
        let bytes = response
            .body_mut()
            .with_config()
            .limit(super::MAX_CONFIG_BYTES)
            .read_to_vec()
            .map_err(|error| match error {
                ureq::Error::BodyExceedsLimit(limit) => {
                    format!("the document is larger than {limit} bytes; refusing to read it")
                }
                other => describe(&other),
            })?;
        let text = String::from_utf8(bytes).map_err(|error| {
            format!(
                "the document is not UTF-8 text (invalid byte at offset {})",
                error.utf8_error().valid_up_to()
            )
        })?;
        Ok(Fetched::Document { text, validator })
    }
}

/// A transport error in a few words.
#[cfg(feature = "remote")]
fn describe(error: &ureq::Error) -> String {
    match error {
        ureq::Error::Timeout(_) => {
            format!("no complete answer within {FETCH_TIMEOUT:?} (connect {CONNECT_TIMEOUT:?})")
        }
        other => other.to_string(),
    }
}
