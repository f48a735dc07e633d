//! The gRPC listeners, plain or over TLS (`serve`): over TLS, connections accepted and their handshakes done on tasks of
//! their own (a slow client holds up no one), handed to tonic as they complete.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::{Connected, TcpConnectInfo};

use crate::tls::TlsAcceptor;

/// One client, its handshake done.
pub(super) struct TlsConnection(TlsStream<TcpStream>);

/// The connections on `listener` whose handshakes finish within `timeout`, until the
/// server stops reading them.
pub(super) fn incoming(
    listener: TcpListener,
    tls: Arc<TlsAcceptor>,
    timeout: Duration,
) -> ReceiverStream<io::Result<TlsConnection>> {
    let (sender, receiver) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            let stream = tokio::select! {
                () = sender.closed() => return,
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => stream,
                    Err(error) => {
                        tracing::warn!(listener = "grpc", %error, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let _ = stream.set_nodelay(true);
            let (tls, sender) = (Arc::clone(&tls), sender.clone());
            tokio::spawn(async move {
                if let Ok(stream) = tls.accept(stream, timeout).await {
                    let _ = sender.send(Ok(TlsConnection(stream))).await;
                }
            });
        }
    });
    ReceiverStream::new(receiver)
}

impl Connected for TlsConnection {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.0.get_ref().0.connect_info()
    }
}

impl AsyncRead for TlsConnection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConnection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}

/// Serves `router` on `listener` — over TLS when `tls` is given, each handshake bounded
/// by `handshake` — until `shutdown` completes.
pub(super) async fn serve(
    router: tonic::transport::server::Router,
    listener: TcpListener,
    tls: Option<Arc<TlsAcceptor>>,
    handshake: Duration,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    match tls {
        None => {
            let incoming =
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
            router
                .serve_with_incoming_shutdown(incoming, shutdown)
                .await
        }
        Some(tls) => {
            let incoming = incoming(listener, tls, handshake);
            router
                .serve_with_incoming_shutdown(incoming, shutdown)
                .await
        }
    }
}
