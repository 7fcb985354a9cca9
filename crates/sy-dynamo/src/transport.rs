//! The connection that timed requests travel on: plain HTTP/1.1 over loopback TCP that can never
//! stall on a delayed ACK.
//!
//! Why: Dynamo 1.6.1's frontend writes its response with Nagle's algorithm on. On a reused
//! keep-alive connection the response head goes out, and the first SSE event (a small second
//! write) is held by the server until the client ACKs the head — which Linux delays by up to
//! ~40 ms. Measured on the local stack: client TTFT 42–50 ms against the server's own
//! `nvext.timing.ttft_ms` of 8–25 ms. Setting `TCP_QUICKACK` makes the kernel ACK at once, but the
//! flag is not sticky (the stack drops back to delayed ACKs on its own), so [`QuickAckStream`]
//! re-arms it after every read that returned data. Cost: one `setsockopt` per read (about a
//! microsecond). `TCP_NODELAY` is set too, so the client's own small writes never wait.
//!
//! On platforms without `TCP_QUICKACK` the stream is a plain `TcpStream` with `TCP_NODELAY`.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::Uri;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// The HTTP client of timed requests (connection pool over [`QuickAckConnector`]).
pub type TimedHttp = Client<QuickAckConnector, Full<Bytes>>;

/// Builds the timed client: keep-alive pool, idle connections closed after `idle`.
pub fn timed_http(connect_timeout: Duration, idle: Duration) -> TimedHttp {
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(idle)
        .build(QuickAckConnector { connect_timeout })
}

/// Connects plain `http://` URIs with `TCP_NODELAY` and per-read `TCP_QUICKACK`.
#[derive(Debug, Clone)]
pub struct QuickAckConnector {
    connect_timeout: Duration,
}

type ConnectFuture = Pin<Box<dyn Future<Output = io::Result<TokioIo<QuickAckStream>>> + Send>>;

impl tower_service::Service<Uri> for QuickAckConnector {
    type Response = TokioIo<QuickAckStream>;
    type Error = io::Error;
    type Future = ConnectFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> ConnectFuture {
        let timeout = self.connect_timeout;
        Box::pin(async move {
            let (host, port) = host_port(&uri)?;
            let tcp = tokio::time::timeout(timeout, TcpStream::connect((host.as_str(), port)))
                .await
                .map_err(|_| {
                    io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("connect to {host}:{port}: no answer within {timeout:?}"),
                    )
                })??;
            tcp.set_nodelay(true)?;
            let stream = QuickAckStream { tcp };
            stream.arm_quickack();
            Ok(TokioIo::new(stream))
        })
    }
}

/// `host` and `port` of a plain-HTTP URI (the timed path never speaks TLS: loopback only).
fn host_port(uri: &Uri) -> io::Result<(String, u16)> {
    if uri.scheme_str().is_some_and(|s| s != "http") {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{uri}: only http:// is supported for timed requests"),
        ));
    }
    let host = uri
        .host()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("{uri}: no host")))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Ok((host.to_string(), uri.port_u16().unwrap_or(80)))
}

/// A TCP stream that ACKs every segment at once (see the module docs).
#[derive(Debug)]
pub struct QuickAckStream {
    tcp: TcpStream,
}

impl QuickAckStream {
    /// Puts the socket in quick-ACK mode (best effort: a failure only costs timing accuracy).
    #[cfg(target_os = "linux")]
    fn arm_quickack(&self) {
        if let Err(e) = socket2::SockRef::from(&self.tcp).set_tcp_quickack(true) {
            tracing::debug!("TCP_QUICKACK: {e}");
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn arm_quickack(&self) {}

    /// Whether the socket is in quick-ACK mode right now (tests).
    #[cfg(target_os = "linux")]
    pub fn quickack(&self) -> io::Result<bool> {
        socket2::SockRef::from(&self.tcp).tcp_quickack()
    }
}

impl AsyncRead for QuickAckStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.tcp).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.arm_quickack();
        }
        polled
    }
}

impl AsyncWrite for QuickAckStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }
}

impl Connection for QuickAckStream {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_of_loopback_uris() {
        let (h, p) = host_port(&"http://127.0.0.1:8000/v1/completions".parse().unwrap()).unwrap();
        assert_eq!((h.as_str(), p), ("127.0.0.1", 8000));
        let (h, p) = host_port(&"http://[::1]/x".parse().unwrap()).unwrap();
        assert_eq!((h.as_str(), p), ("::1", 80));
        let e = host_port(&"https://127.0.0.1/x".parse().unwrap()).unwrap_err();
        assert!(e.to_string().contains("only http://"), "{e}");
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn reads_leave_the_socket_in_quickack_mode() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            for _ in 0..3 {
                s.write_all(b"x").await.unwrap();
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        let mut c = QuickAckConnector {
            connect_timeout: Duration::from_secs(2),
        };
        let uri: Uri = format!("http://{addr}/").parse().unwrap();
        let mut io = tower_service::Service::call(&mut c, uri)
            .await
            .unwrap()
            .into_inner();
        let mut b = [0u8; 1];
        for _ in 0..3 {
            io.read_exact(&mut b).await.unwrap();
            assert!(
                io.quickack().unwrap(),
                "quick-ACK mode re-armed after a read"
            );
        }
        server.await.unwrap();
    }
}
