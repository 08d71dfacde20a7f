//! The end of a worker's output, bounded: what every backend's `logs` returns. Output is read
//! as it arrives and only its last [`MAX_LOG_BYTES`] are kept, so a worker that printed
//! gigabytes costs the controller one bounded buffer, and the reply says when it was cut.

use std::io::Read;

use super::Logs;

/// The most text a logs reply carries.
pub const MAX_LOG_BYTES: usize = 1 << 20;
/// The most lines a caller may ask for.
pub const MAX_TAIL_LINES: u32 = 10_000;
/// Logs are read as a stream, keeping only their end; this bounds how much is read at all.
pub const MAX_LOG_READ: u64 = 256 << 20;

/// The last `lines` lines of what `source` gives until its end, within [`MAX_LOG_BYTES`];
/// Docker's log frames decoded when `framed`.
pub fn read_tail(source: &mut impl Read, lines: u32, framed: bool) -> std::io::Result<Logs> {
    let mut tail = Tail::new(MAX_LOG_BYTES);
    let mut demux = framed.then(Demux::new);
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        match source.read(&mut chunk) {
            Ok(0) => return Ok(tail.finish(lines)),
            Ok(n) => match demux.as_mut() {
                Some(d) => d.push(&chunk[..n], &mut tail),
                None => tail.push(&chunk[..n]),
            },
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Keeps the last `keep` bytes of what is pushed into it.
pub struct Tail {
    buf: Vec<u8>,
    keep: usize,
    cut: bool,
}

impl Tail {
    pub fn new(keep: usize) -> Tail {
        Tail {
            buf: Vec::new(),
            keep,
            cut: false,
        }
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
        // Dropping the front only once it holds twice the bound keeps pushes linear.
        if self.buf.len() > 2 * self.keep {
            let extra = self.buf.len() - self.keep;
            self.buf.drain(..extra);
            self.cut = true;
        }
    }

    /// The last `lines` lines of what was kept, as text (invalid UTF-8 replaced); `truncated`
    /// when the byte bound cut into them (a partly cut first line is dropped whole).
    pub fn finish(mut self, lines: u32) -> Logs {
        if self.buf.len() > self.keep {
            let extra = self.buf.len() - self.keep;
            self.buf.drain(..extra);
            self.cut = true;
        }
        let mut start = 0;
        if self.cut {
            start = self
                .buf
                .iter()
                .position(|b| *b == b'\n')
                .map_or(self.buf.len(), |i| i + 1);
        }
        let body = &self.buf[start..];
        // The last `lines` lines: a final newline ends the last line, it does not start one.
        let trimmed = body.strip_suffix(b"\n").unwrap_or(body);
        let from = if lines == 0 {
            trimmed.len()
        } else {
            trimmed
                .iter()
                .enumerate()
                .rev()
                .filter(|(_, b)| **b == b'\n')
                .nth(lines as usize - 1)
                .map_or(0, |(i, _)| i + 1)
        };
        let cut_by_bytes = self.cut && from == 0;
        Logs {
            text: String::from_utf8_lossy(&body[from.min(body.len())..]).into_owned(),
            truncated: cut_by_bytes,
        }
    }
}

/// Docker's log stream for a container without a terminal: frames of an 8-byte header
/// (stream 0/1/2, three zero bytes, big-endian length) and that many bytes of output. A stream
/// that does not start like a frame (a container with a terminal) is passed through as it is.
pub struct Demux {
    header: Vec<u8>,
    remaining: usize,
    raw: Option<bool>,
}

impl Default for Demux {
    fn default() -> Self {
        Demux::new()
    }
}

impl Demux {
    pub fn new() -> Demux {
        Demux {
            header: Vec::with_capacity(8),
            remaining: 0,
            raw: None,
        }
    }

    /// Feeds bytes from the wire; the output in them goes to `out`.
    pub fn push(&mut self, mut bytes: &[u8], out: &mut Tail) {
        if self.raw.is_none() {
            if let Some(first) = bytes.first() {
                self.raw = Some(*first > 2);
            }
        }
        if self.raw == Some(true) {
            out.push(bytes);
            return;
        }
        while !bytes.is_empty() {
            if self.remaining > 0 {
                let n = self.remaining.min(bytes.len());
                out.push(&bytes[..n]);
                self.remaining -= n;
                bytes = &bytes[n..];
                continue;
            }
            let need = 8 - self.header.len();
            let n = need.min(bytes.len());
            self.header.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            if self.header.len() == 8 {
                self.remaining = u32::from_be_bytes([
                    self.header[4],
                    self.header[5],
                    self.header[6],
                    self.header[7],
                ]) as usize;
                self.header.clear();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(stream: u8, text: &str) -> Vec<u8> {
        let mut f = vec![stream, 0, 0, 0];
        f.extend_from_slice(&(text.len() as u32).to_be_bytes());
        f.extend_from_slice(text.as_bytes());
        f
    }

    #[test]
    fn frames_are_decoded_across_any_split_and_stdout_and_stderr_interleave() {
        let mut wire = frame(1, "one\n");
        wire.extend(frame(2, "two\n"));
        wire.extend(frame(1, "three\n"));
        for split in 1..wire.len() {
            let (mut d, mut t) = (Demux::new(), Tail::new(MAX_LOG_BYTES));
            for piece in wire.chunks(split) {
                d.push(piece, &mut t);
            }
            let logs = t.finish(100);
            assert_eq!(logs.text, "one\ntwo\nthree\n", "split {split}");
            assert!(!logs.truncated);
        }
    }

    #[test]
    fn a_terminal_stream_passes_through() {
        let (mut d, mut t) = (Demux::new(), Tail::new(MAX_LOG_BYTES));
        d.push(b"plain output\n", &mut t);
        assert_eq!(t.finish(10).text, "plain output\n");
    }

    #[test]
    fn the_last_lines_and_the_byte_bound() {
        let mut t = Tail::new(MAX_LOG_BYTES);
        t.push(b"a\nb\nc\nd");
        assert_eq!(t.finish(2).text, "c\nd");
        let mut t = Tail::new(MAX_LOG_BYTES);
        t.push(b"a\nb\nc\n");
        assert_eq!(t.finish(2).text, "b\nc\n");
        assert_eq!(Tail::new(10).finish(5).text, "");
        // 100 lines of 10 bytes through a 95-byte bound: the cut first line goes whole.
        let mut t = Tail::new(95);
        for i in 0..100 {
            t.push(format!("line {i:04}\n").as_bytes());
        }
        let logs = t.finish(MAX_TAIL_LINES);
        assert!(logs.truncated);
        assert!(logs.text.starts_with("line 0091\n") && logs.text.ends_with("line 0099\n"));
        // Asking for fewer lines than the bound holds is not a cut.
        let mut t = Tail::new(95);
        for i in 0..100 {
            t.push(format!("line {i:04}\n").as_bytes());
        }
        let logs = t.finish(3);
        assert!(!logs.truncated);
        assert_eq!(logs.text, "line 0097\nline 0098\nline 0099\n");
    }
}
