//! A chunked request body (RFC 9112 section 7.1), decoded as it is read, so a route's
//! request body streams to the upstream whatever its framing: chunk sizes in hex (extensions
//! ignored), each chunk's CRLF, trailers read and dropped. Bounded: a size line of at most
//! 1 KiB, and at most `limit` bytes of body in all.

use std::io::{self, BufRead, Read};

const MAX_LINE: usize = 1024;

/// Reads the decoded body of the chunked stream `inner`.
pub(super) struct Chunked<R> {
    inner: R,
    /// Bytes left in the current chunk; `None` before a size line.
    left: Option<u64>,
    done: bool,
    read: u64,
    limit: u64,
}

impl<R: BufRead> Chunked<R> {
    pub(super) fn new(inner: R, limit: u64) -> Chunked<R> {
        Chunked {
            inner,
            left: None,
            done: false,
            read: 0,
            limit,
        }
    }

    /// One CRLF- (or LF-) ended line, without its end, at most [`MAX_LINE`] bytes.
    fn line(&mut self) -> io::Result<String> {
        let mut line = Vec::new();
        (&mut self.inner)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line)?;
        if !line.ends_with(b"\n") {
            return Err(bad(
                "a chunk line is longer than 1 KiB or the body ended inside it",
            ));
        }
        line.pop();
        if line.ends_with(b"\r") {
            line.pop();
        }
        String::from_utf8(line).map_err(|_| bad("a chunk line is not text"))
    }

    /// The next chunk's size, from its size line; 0 ends the body (its trailers are read).
    fn next_size(&mut self) -> io::Result<u64> {
        let line = self.line()?;
        let digits = line.split(';').next().unwrap_or("").trim();
        if digits.is_empty() || digits.len() > 15 {
            return Err(bad("a chunk size is not a hexadecimal number"));
        }
        let size = u64::from_str_radix(digits, 16)
            .map_err(|_| bad("a chunk size is not a hexadecimal number"))?;
        if size == 0 {
            while !self.line()?.is_empty() {}
        }
        Ok(size)
    }
}

fn bad(why: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why)
}

impl<R: BufRead> Read for Chunked<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.done || buf.is_empty() {
            return Ok(0);
        }
        let left = match self.left {
            Some(n) if n > 0 => n,
            _ => {
                let size = self.next_size()?;
                if size == 0 {
                    self.done = true;
                    return Ok(0);
                }
                size
            }
        };
        if self.read + left > self.limit {
            return Err(bad("the chunked body is larger than a route takes"));
        }
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        if n == 0 {
            return Err(bad("the body ended inside a chunk"));
        }
        let rest = left - n as u64;
        self.read += n as u64;
        self.left = Some(rest);
        if rest == 0 {
            if !self.line()?.is_empty() {
                return Err(bad("a chunk is longer than its size says"));
            }
            self.left = None;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(raw: &[u8], limit: u64) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        Chunked::new(io::BufReader::new(raw), limit).read_to_end(&mut out)?;
        Ok(out)
    }

    #[test]
    fn a_chunked_body_is_decoded_with_extensions_and_trailers() {
        let raw = b"5;ext=1\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nX-Trailer: y\r\n\r\nNEXT";
        assert_eq!(decode(raw, 1 << 20).unwrap(), b"hello world");
        assert_eq!(decode(b"0\r\n\r\n", 10).unwrap(), b"");
    }

    #[test]
    fn a_malformed_or_oversized_chunked_body_is_an_error() {
        for raw in [
            &b"zz\r\nhello\r\n0\r\n\r\n"[..],
            b"5\r\nhelloX\r\n0\r\n\r\n",
            b"5\r\nhel",
            b"",
            b"ffffffffffffffffff\r\n",
        ] {
            assert!(
                decode(raw, 1 << 20).is_err(),
                "{:?}",
                String::from_utf8_lossy(raw)
            );
        }
        assert!(decode(b"5\r\nhello\r\n0\r\n\r\n", 4).is_err());
        let long = format!("{}\r\n", "1".repeat(2000));
        assert!(decode(long.as_bytes(), 1 << 20).is_err());
    }
}
