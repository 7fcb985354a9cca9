//! An independent client for the frontend's own TTFT floor: blocking `std::net`, hand-written
//! HTTP/1.1, nothing shared with `sy-dynamo` (no hyper, no SSE parser, no timed transport). It
//! sends the same pinned streaming `/v1/completions` the collector sends, with `TCP_NODELAY` and
//! `TCP_QUICKACK` re-armed after every read (no delayed-ACK stall), and takes the arrival of the
//! read that completes the first event with non-empty text as its TTFT.
//!
//! Its client − server gap is what any careful client sees on this stack and machine: the work
//! Dynamo's frontend does outside its own timer (parsing the request and its token array, writing
//! the SSE event). The collector's gap is judged against it, measured in the same test, so the
//! judge moves with the machine's speed instead of a constant fitted on another day.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The pin of a request: worker id and, for a data-parallel worker, its rank.
#[derive(Debug, Clone, Copy)]
pub struct Pin {
    pub worker_id: u64,
    pub dp_rank: Option<u32>,
}

/// One request's TTFTs (ms): the client's and the server's `nvext.timing.ttft_ms`.
#[derive(Debug, Clone, Copy)]
pub struct Timed {
    pub client_ms: f64,
    pub server_ms: f64,
}

impl Timed {
    pub fn gap_ms(&self) -> f64 {
        self.client_ms - self.server_ms
    }
}

fn body(model: &str, tokens: &[u64], max_tokens: u32, pin: Pin) -> Vec<u8> {
    let mut nvext = json!({
        "backend_instance_id": pin.worker_id,
        "extra_fields": ["worker_id", "timing"],
    });
    if let Some(rank) = pin.dp_rank {
        nvext["dp_rank"] = json!(rank);
    }
    serde_json::to_vec(&json!({
        "model": model,
        "prompt": tokens,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": true,
        "stream_options": {"include_usage": true},
        "nvext": nvext,
    }))
    .unwrap()
}

/// `host:port` of an `http://127.0.0.1:PORT` or `http://localhost:PORT` URL.
fn authority(url: &str) -> &str {
    let rest = url.strip_prefix("http://").expect("http:// URL");
    let auth = rest.split('/').next().unwrap();
    assert!(
        auth.starts_with("127.0.0.1:") || auth.starts_with("localhost:"),
        "loopback only: {url}"
    );
    auth
}

fn quickack(stream: &TcpStream) {
    socket2::SockRef::from(stream)
        .set_tcp_quickack(true)
        .expect("TCP_QUICKACK");
}

/// The SSE events completed so far (`data: {...}` lines; chunked-encoding size lines and
/// keep-alives are skipped).
fn events(raw: &[u8]) -> impl Iterator<Item = Value> + '_ {
    raw.split(|&b| b == b'\n')
        .filter_map(|line| line.strip_prefix(b"data: "))
        .filter_map(|json| serde_json::from_slice::<Value>(json.trim_ascii_end()).ok())
}

fn has_text(event: &Value) -> bool {
    event["choices"][0]["text"]
        .as_str()
        .is_some_and(|t| !t.is_empty())
}

/// Sends one request on a fresh connection and reads it to the end.
pub fn send(frontend: &str, model: &str, tokens: &[u64], max_tokens: u32, pin: Pin) -> Timed {
    let auth = authority(frontend);
    let body = body(model, tokens, max_tokens, pin);
    let mut stream = TcpStream::connect(auth).expect("connect to the frontend");
    stream.set_nodelay(true).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    quickack(&stream);
    let head = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: {auth}\r\nContent-Type: application/json\r\n\
         Accept: text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let mut request = head.into_bytes();
    request.extend_from_slice(&body);
    stream.write_all(&request).unwrap();
    let sent = Instant::now();
    let (mut raw, mut chunk, mut first) = (Vec::new(), vec![0u8; 64 * 1024], None);
    loop {
        let n = stream.read(&mut chunk).expect("read the answer");
        let arrived = Instant::now();
        quickack(&stream);
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&chunk[..n]);
        if first.is_none() && events(&raw).any(|e| has_text(&e)) {
            first = Some(arrived - sent);
        }
    }
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 200"), "answer: {text}");
    let server_ms = events(&raw)
        .find_map(|e| e["nvext"]["timing"]["ttft_ms"].as_f64())
        .unwrap_or_else(|| panic!("no nvext.timing.ttft_ms in: {text}"));
    let first = first.unwrap_or_else(|| panic!("no event with text in: {text}"));
    Timed {
        client_ms: first.as_secs_f64() * 1e3,
        server_ms,
    }
}

/// A probe of `n` tokens whose first `primed` tokens are cached on the pinned worker first (a
/// priming request), sent after `settle` of quiet whether primed or not, like one candidate of
/// the collector's Q-grid units.
pub fn probe(
    frontend: &str,
    model: &str,
    pin: Pin,
    n: usize,
    primed: usize,
    settle: Duration,
) -> Timed {
    let tokens = crate::stack::fresh_tokens(n);
    if primed > 0 {
        send(frontend, model, &tokens[..primed], 1, pin);
    }
    std::thread::sleep(settle);
    send(frontend, model, &tokens, 2, pin)
}
