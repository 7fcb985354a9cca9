//! An incremental Server-Sent-Events parser: bytes in, complete events out.
//!
//! Handles events split across network chunks, `\n` and `\r\n` line ends, several `data:` lines
//! per event (joined with `\n`), comments and the `event:` field. Nothing is copied twice: the
//! buffer keeps the unparsed tail only.

/// One complete event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, when present (Dynamo sends `event: error` on some errors).
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// Accumulates bytes and yields complete events.
#[derive(Debug, Default)]
pub struct SseParser {
    buf: Vec<u8>,
    /// Start of the unparsed part of `buf`.
    pos: usize,
    event: Option<String>,
    data: Option<String>,
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds bytes received from the network.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.pos > 0 && self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        } else if self.pos > 64 * 1024 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes received but not yet part of a complete event.
    pub fn pending(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The next complete event, if the buffer holds one.
    pub fn next_event(&mut self) -> Option<SseEvent> {
        loop {
            let rest = &self.buf[self.pos..];
            let nl = rest.iter().position(|&b| b == b'\n')?;
            let mut line = &rest[..nl];
            if line.last() == Some(&b'\r') {
                line = &line[..line.len() - 1];
            }
            let line = String::from_utf8_lossy(line).into_owned();
            self.pos += nl + 1;
            if line.is_empty() {
                if let Some(data) = self.data.take() {
                    return Some(SseEvent {
                        event: self.event.take(),
                        data,
                    });
                }
                self.event = None;
                continue;
            }
            if line.starts_with(':') {
                continue;
            }
            let (field, value) = match line.split_once(':') {
                Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
                None => (line.as_str(), ""),
            };
            match field {
                "data" => match &mut self.data {
                    Some(d) => {
                        d.push('\n');
                        d.push_str(value);
                    }
                    None => self.data = Some(value.to_string()),
                },
                "event" => self.event = Some(value.to_string()),
                _ => {}
            }
        }
    }

    /// At end of stream: an event that was complete except for its blank line.
    pub fn finish(&mut self) -> Option<SseEvent> {
        if self.pending() > 0 {
            self.push(b"\n");
        }
        if let Some(e) = self.next_event() {
            return Some(e);
        }
        self.data.take().map(|data| SseEvent {
            event: self.event.take(),
            data,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn all(p: &mut SseParser) -> Vec<SseEvent> {
        std::iter::from_fn(|| p.next_event()).collect()
    }

    #[test]
    fn split_chunks_and_crlf() {
        let mut p = SseParser::new();
        p.push(b"data: {\"a\":");
        assert!(p.next_event().is_none());
        p.push(b"1}\r\n\r\n: comment\n\nevent: error\ndata: x\ndata: y\n\ndata: [DONE]\n\n");
        let got = all(&mut p);
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].data, "{\"a\":1}");
        assert_eq!(got[1].event.as_deref(), Some("error"));
        assert_eq!(got[1].data, "x\ny");
        assert_eq!(got[2].data, "[DONE]");
        assert_eq!(p.pending(), 0);
    }

    #[test]
    fn finish_flushes_unterminated_event() {
        let mut p = SseParser::new();
        p.push(b"data: last");
        assert!(p.next_event().is_none());
        assert_eq!(p.finish().unwrap().data, "last");
    }

    proptest! {
        #[test]
        fn any_chunking_gives_the_same_events(cuts in proptest::collection::vec(0usize..200, 0..10)) {
            let text = b"data: one\n\ndata: two\r\n\r\nevent: e\ndata: three\n\n: c\ndata: [DONE]\n\n";
            let mut whole = SseParser::new();
            whole.push(text);
            let expected = all(&mut whole);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % text.len()).collect();
            cuts.sort_unstable();
            let mut p = SseParser::new();
            let mut got = Vec::new();
            let mut last = 0;
            for c in cuts.into_iter().chain(std::iter::once(text.len())) {
                p.push(&text[last..c]);
                got.extend(all(&mut p));
                last = c;
            }
            prop_assert_eq!(got, expected);
        }
    }
}
