//! The HTTP client OTLP over HTTP exports through: hyper-util's pooled client over rustls
//! (the system's roots for `https://` collectors), the stack the proxy already has, so no
//! second HTTP client (reqwest) is compiled in.

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use opentelemetry_http::HttpError;

/// The most of a collector's answer that is read.
const MAX_ANSWER: usize = 4 * 1024 * 1024;

/// A pooled HTTP/1.1 client, TLS where the URL asks, each exchange bounded by a timeout.
#[derive(Clone, Debug)]
pub(crate) struct Client {
    inner: hyper_util::client::legacy::Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    timeout: std::time::Duration,
}

impl Client {
    /// A client trusting `roots`, or the system's roots when `None`.
    pub(crate) fn new(
        timeout: std::time::Duration,
        roots: Option<rustls::RootCertStore>,
    ) -> Client {
        let system = || crate::tls::client_config(None);
        let tls = match roots {
            Some(roots) => Ok(std::sync::Arc::new(
                rustls::ClientConfig::builder()
                    .with_root_certificates(roots)
                    .with_no_client_auth(),
            )),
            None => system(),
        }
        .map_or_else(
            |_| {
                // No system roots: plain http:// collectors still work, https:// ones
                // fail their handshake (and say so in the exporter's error).
                rustls::ClientConfig::builder()
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth()
            },
            |config| (*config).clone(),
        );
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        Client {
            inner: hyper_util::client::legacy::Client::builder(TokioExecutor::new())
                .build(connector),
            timeout,
        }
    }
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for Client {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
        let request = Request::from_parts(parts, Full::new(body));
        let answer = async {
            let response = self.inner.request(request).await?;
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, MAX_ANSWER).collect().await?.to_bytes();
            Ok::<_, HttpError>(Response::from_parts(parts, body))
        };
        tokio::time::timeout(self.timeout, answer)
            .await
            .map_err(|_| HttpError::from("the collector did not answer in time"))?
    }
}
