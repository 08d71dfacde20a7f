//! The wire format: request heads (through httparse), body framing, chunked bodies, and
//! response encoding. Everything here works on bytes already received, so tests and fuzz
//! targets drive it without a socket. Refusals are typed: each names its status and its one
//! line of explanation, as httparse types its own errors.

use std::fmt;

use super::{Response, MAX_BODY, MAX_HEAD, MAX_HEADERS, MAX_REQUEST_LINE};
use crate::time::{http_date, now_millis};

/// Longest chunk-size or trailer line in a chunked body.
const MAX_CHUNK_LINE: usize = 4096;

/// Why a request cannot be served: answered with [`Refusal::status`] and the one-line
/// [`Display`](fmt::Display) text, then the connection closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The request line or a header is not valid HTTP/1.x (or not UTF-8).
    Malformed,
    /// The request line is longer than [`MAX_REQUEST_LINE`].
    RequestLineTooLong,
    /// The head is longer than [`MAX_HEAD`].
    HeadTooLarge,
    /// More than [`MAX_HEADERS`] headers, or trailer fields.
    TooManyHeaders,
    /// An HTTP/1.1 request without `Host`.
    MissingHost,
    /// More than one `Host` header.
    DuplicateHost,
    /// A `Content-Length` that is not one decimal number, or two of them, or one beside
    /// `Transfer-Encoding` (request-smuggling shapes).
    BadFraming,
    /// A transfer coding other than a lone `chunked` on HTTP/1.1.
    UnsupportedCoding,
    /// A chunked body whose size or chunk line is malformed.
    BadChunk,
}

impl Refusal {
    pub fn status(self) -> u16 {
        match self {
            Refusal::Malformed
            | Refusal::MissingHost
            | Refusal::DuplicateHost
            | Refusal::BadFraming
            | Refusal::BadChunk => 400,
            Refusal::RequestLineTooLong => 414,
            Refusal::HeadTooLarge | Refusal::TooManyHeaders => 431,
            Refusal::UnsupportedCoding => 501,
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            Refusal::Malformed => "the request line or a header is not valid HTTP/1.1",
            Refusal::RequestLineTooLong => "the request line is longer than 8 KiB",
            Refusal::HeadTooLarge => "the request head is longer than 16 KiB",
            Refusal::TooManyHeaders => "the request has more than 100 header or trailer fields",
            Refusal::MissingHost => "an HTTP/1.1 request needs a Host header",
            Refusal::DuplicateHost => "the request has more than one Host header",
            Refusal::BadFraming => {
                "Content-Length must be one decimal number and never beside Transfer-Encoding"
            }
            Refusal::UnsupportedCoding => "only Transfer-Encoding: chunked (HTTP/1.1) is supported",
            Refusal::BadChunk => "the chunked body is malformed",
        };
        f.write_str(text)
    }
}

impl std::error::Error for Refusal {}

/// Why reading a request stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Answer the refusal, then close.
    Refuse(Refusal),
    /// Close silently (peer closed, timed out, shutting down).
    Close,
}

impl From<Refusal> for Stop {
    fn from(r: Refusal) -> Stop {
        Stop::Refuse(r)
    }
}

/// A parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub method: String,
    pub target: String,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor: u8,
    pub headers: Vec<(String, String)>,
}

/// Parses a request head from the start of `buf`: `Ok(None)` while incomplete (and within
/// the limits), `Ok(Some((head, length)))` once complete, `Err` when it can never be a valid
/// head.
pub fn parse_head(buf: &[u8]) -> Result<Option<(Head, usize)>, Refusal> {
    // Leading empty lines before a request are tolerated (RFC 9112 section 2.2).
    let skip = buf
        .iter()
        .take_while(|b| **b == b'\r' || **b == b'\n')
        .count();
    let buf = &buf[skip..];
    let line_end = buf.iter().position(|b| *b == b'\n');
    match line_end {
        Some(end) if end > MAX_REQUEST_LINE => return Err(Refusal::RequestLineTooLong),
        None if buf.len() > MAX_REQUEST_LINE => return Err(Refusal::RequestLineTooLong),
        _ => {}
    }
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => {
            if len > MAX_HEAD {
                return Err(Refusal::HeadTooLarge);
            }
            let method = req.method.ok_or(Refusal::Malformed)?.to_string();
            let target = req.path.ok_or(Refusal::Malformed)?.to_string();
            let minor = req.version.ok_or(Refusal::Malformed)?;
            let headers = req
                .headers
                .iter()
                .map(|h| {
                    std::str::from_utf8(h.value)
                        .map(|v| (h.name.to_string(), v.trim().to_string()))
                        .map_err(|_| Refusal::Malformed)
                })
                .collect::<Result<Vec<_>, Refusal>>()?;
            Ok(Some((
                Head {
                    method,
                    target,
                    minor,
                    headers,
                },
                skip + len,
            )))
        }
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => Err(Refusal::HeadTooLarge),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err(Refusal::TooManyHeaders),
        Err(_) => Err(Refusal::Malformed),
    }
}

/// RFC 9112 section 3.2: an HTTP/1.1 request has exactly one `Host`; HTTP/1.0 at most one.
pub fn check_host(head: &Head) -> Result<(), Refusal> {
    let hosts = head
        .headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("Host"))
        .count();
    match (hosts, head.minor) {
        (0, 0) | (1, _) => Ok(()),
        (0, _) => Err(Refusal::MissingHost),
        _ => Err(Refusal::DuplicateHost),
    }
}

/// How the body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    Length(usize),
    Chunked,
    /// Declared longer than [`MAX_BODY`].
    TooLarge,
}

/// The body framing of a head, refusing anything ambiguous (request smuggling shapes).
pub fn framing(head: &Head) -> Result<Framing, Refusal> {
    let values = |name: &str| -> Vec<&str> {
        head.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    };
    let lengths = values("Content-Length");
    let encodings = values("Transfer-Encoding");
    match (lengths.as_slice(), encodings.as_slice()) {
        ([], []) => Ok(Framing::Length(0)),
        ([], [te]) if te.eq_ignore_ascii_case("chunked") && head.minor == 1 => Ok(Framing::Chunked),
        ([], [_]) => Err(Refusal::UnsupportedCoding),
        ([cl], []) => {
            if cl.is_empty() || cl.len() > 19 || !cl.bytes().all(|b| b.is_ascii_digit()) {
                return Err(Refusal::BadFraming);
            }
            match cl.parse::<u64>() {
                Ok(n) if n > MAX_BODY as u64 => Ok(Framing::TooLarge),
                Ok(n) => Ok(Framing::Length(n as usize)),
                Err(_) => Err(Refusal::BadFraming),
            }
        }
        _ => Err(Refusal::BadFraming),
    }
}

/// A source of body bytes with a deadline (the connection, or a slice in tests and fuzzing).
pub trait Source {
    /// At least one more byte appended to the pending bytes, or why not.
    fn more(&mut self) -> Result<(), Stop>;
    fn pending(&self) -> &[u8];
    fn take(&mut self, n: usize) -> Vec<u8>;
}

/// Bytes already received (for tests and fuzzing); running out means the peer closed.
pub struct SliceSource<'a> {
    data: &'a [u8],
    pos: usize,
    visible: usize,
}

impl<'a> SliceSource<'a> {
    pub fn new(data: &'a [u8]) -> SliceSource<'a> {
        SliceSource {
            data,
            pos: 0,
            visible: 0,
        }
    }
}

impl Source for SliceSource<'_> {
    fn more(&mut self) -> Result<(), Stop> {
        if self.pos + self.visible >= self.data.len() {
            return Err(Stop::Close);
        }
        self.visible = (self.visible + 7).min(self.data.len() - self.pos);
        Ok(())
    }
    fn pending(&self) -> &[u8] {
        &self.data[self.pos..self.pos + self.visible]
    }
    fn take(&mut self, n: usize) -> Vec<u8> {
        let out = self.data[self.pos..self.pos + n].to_vec();
        self.pos += n;
        self.visible -= n;
        out
    }
}

/// Reads a `Content-Length` body (at most [`MAX_BODY`]).
pub fn read_length(src: &mut dyn Source, n: usize) -> Result<Vec<u8>, Stop> {
    while src.pending().len() < n {
        src.more()?;
    }
    Ok(src.take(n))
}

/// Decodes a chunked body through the cap: `Ok(None)` when it grows past [`MAX_BODY`].
pub fn read_chunked(src: &mut dyn Source) -> Result<Option<Vec<u8>>, Stop> {
    let mut body = Vec::new();
    loop {
        let line = read_line(src)?;
        let size_text = line.split(|b| *b == b';').next().unwrap_or(&[]);
        let size_text = std::str::from_utf8(size_text)
            .map_err(|_| Refusal::BadChunk)?
            .trim_matches([' ', '\t']);
        if size_text.is_empty()
            || size_text.len() > 16
            || !size_text.bytes().all(|b| b.is_ascii_hexdigit())
        {
            return Err(Refusal::BadChunk.into());
        }
        let size = usize::from_str_radix(size_text, 16).map_err(|_| Refusal::BadChunk)?;
        if size == 0 {
            // Trailer fields, then the empty line.
            let mut trailers = 0;
            loop {
                if read_line(src)?.is_empty() {
                    return Ok(Some(body));
                }
                trailers += 1;
                if trailers > MAX_HEADERS {
                    return Err(Refusal::TooManyHeaders.into());
                }
            }
        }
        if body.len().saturating_add(size) > MAX_BODY {
            return Ok(None);
        }
        body.extend_from_slice(&read_length(src, size)?);
        if read_line(src)? != b"" {
            return Err(Refusal::BadChunk.into());
        }
    }
}

/// One line without its CRLF (or LF), at most [`MAX_CHUNK_LINE`] bytes.
fn read_line(src: &mut dyn Source) -> Result<Vec<u8>, Stop> {
    loop {
        if let Some(end) = src.pending().iter().position(|b| *b == b'\n') {
            let mut line = src.take(end + 1);
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            return Ok(line);
        }
        if src.pending().len() > MAX_CHUNK_LINE {
            return Err(Refusal::BadChunk.into());
        }
        src.more()?;
    }
}

/// Whether any `name` header lists `token` (comma-separated, case-insensitive).
pub(crate) fn has_token(headers: &[(String, String)], name: &str, token: &str) -> bool {
    headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case(name))
        .any(|(_, v)| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
}

/// The bytes of a response; `Content-Length`, `Connection` and `Date` are this layer's.
pub(crate) fn encode(r: &Response, keep_alive: bool, head_only: bool) -> Vec<u8> {
    // Head and body in one allocation (a list's reply is kilobytes; grown from the status
    // line it would be copied a handful of times).
    let head: usize = 160
        + r.headers
            .iter()
            .map(|(n, v)| n.len() + v.len() + 4)
            .sum::<usize>();
    let mut out = Vec::with_capacity(head + if head_only { 0 } else { r.body.len() });
    out.extend_from_slice(format!("HTTP/1.1 {} {}\r\n", r.status, reason(r.status)).as_bytes());
    let mut push = |name: &str, value: &str| {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    };
    push("Date", &http_date(now_millis() / 1000));
    for (name, value) in &r.headers {
        let managed = ["content-length", "connection", "transfer-encoding", "date"]
            .iter()
            .any(|m| name.eq_ignore_ascii_case(m));
        if managed {
            continue;
        }
        if header_safe(name, value) {
            push(name, value);
        } else {
            log::warn!("http: dropped an invalid response header {name:?}");
        }
    }
    let bodiless = r.status == 204 || r.status == 304 || (100..200).contains(&r.status);
    let streamed = r.stream.is_some() && !bodiless;
    if streamed {
        // Its length is not known: chunked, and the connection ends with it.
        push("Transfer-Encoding", "chunked");
    } else if !bodiless {
        push("Content-Length", &r.body.len().to_string());
    }
    push(
        "Connection",
        if keep_alive && !streamed {
            "keep-alive"
        } else {
            "close"
        },
    );
    out.extend_from_slice(b"\r\n");
    if !bodiless && !head_only && !streamed {
        out.extend_from_slice(&r.body);
    }
    out
}

/// One chunk of a chunked body (never empty: an empty chunk ends the body).
pub(crate) fn chunk(bytes: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", bytes.len()).into_bytes();
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
    out
}

/// The end of a chunked body.
pub(crate) const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// A header that cannot split the response: a token name and a value without control
/// characters (no CR/LF injection).
pub(crate) fn header_safe(name: &str, value: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
        && value
            .bytes()
            .all(|b| b == b'\t' || (0x20..0x7f).contains(&b))
}

pub(crate) fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        304 => "Not Modified",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(raw: &str) -> Result<Option<(Head, usize)>, u16> {
        parse_head(raw.as_bytes()).map_err(Refusal::status)
    }

    fn head_bytes(raw: &[u8]) -> Result<Option<(Head, usize)>, u16> {
        parse_head(raw).map_err(Refusal::status)
    }

    #[test]
    fn a_head_is_parsed_to_its_method_target_version_and_trimmed_headers() {
        let (h, len) = head("GET /a?b=1 HTTP/1.1\r\nHost: x\r\nX-A:  v \r\n\r\nBODY")
            .unwrap()
            .unwrap();
        assert_eq!(
            (h.method.as_str(), h.target.as_str(), h.minor),
            ("GET", "/a?b=1", 1)
        );
        assert_eq!(h.headers[1], ("X-A".to_string(), "v".to_string()));
        assert_eq!(len, 42);
        assert_eq!(head("GET / HTTP/1.1\r\nHost: x\r\n"), Ok(None));
        assert_eq!(
            head("\r\nGET / HTTP/1.0\r\n\r\n").unwrap().unwrap().0.minor,
            0
        );
        assert_eq!(head("G\u{e9}T / HTTP/1.1\r\n\r\n"), Err(400));
        assert_eq!(head_bytes(b"GET /\xff HTTP/1.1\r\n\r\n"), Err(400));
        assert_eq!(head_bytes(b"GET / HTTP/1.1\r\nX: \xff\r\n\r\n"), Err(400));
        assert_eq!(head("GET / HTTP/1.1\r\nBad Header\r\n\r\n"), Err(400));
    }

    #[test]
    fn an_overlong_request_line_is_414_and_too_many_or_too_long_headers_431() {
        let long_line = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(MAX_REQUEST_LINE));
        assert_eq!(head(&long_line), Err(414));
        assert_eq!(
            head(&format!("GET /{}", "a".repeat(MAX_REQUEST_LINE + 1))),
            Err(414)
        );
        let many: String = (0..=MAX_HEADERS).map(|i| format!("X-{i}: v\r\n")).collect();
        assert_eq!(head(&format!("GET / HTTP/1.1\r\n{many}\r\n")), Err(431));
        let big = format!("GET / HTTP/1.1\r\nX: {}\r\n", "v".repeat(MAX_HEAD));
        assert_eq!(head(&big), Err(431));
        let big = format!(
            "GET / HTTP/1.1\r\nX: {}\r\nY: {}\r\n\r\n",
            "v".repeat(8000),
            "v".repeat(8500)
        );
        assert_eq!(head(&big), Err(431));
    }

    #[test]
    fn http11_needs_exactly_one_host_and_http10_none() {
        let host = |raw: &str| check_host(&head(raw).unwrap().unwrap().0);
        assert_eq!(host("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), Ok(()));
        assert_eq!(host("GET / HTTP/1.1\r\n\r\n"), Err(Refusal::MissingHost));
        assert_eq!(
            host("GET / HTTP/1.1\r\nHost: x\r\nhost: y\r\n\r\n"),
            Err(Refusal::DuplicateHost)
        );
        assert_eq!(host("GET / HTTP/1.0\r\n\r\n"), Ok(()));
        assert_eq!(
            host("GET / HTTP/1.0\r\nHost: x\r\nHost: x\r\n\r\n"),
            Err(Refusal::DuplicateHost)
        );
        assert_eq!(Refusal::MissingHost.status(), 400);
    }

    fn framing_of(headers: &[(&str, &str)], minor: u8) -> Result<Framing, u16> {
        framing(&Head {
            method: "POST".into(),
            target: "/".into(),
            minor,
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        })
        .map_err(Refusal::status)
    }

    #[test]
    fn a_body_is_framed_by_its_length_or_chunks_and_conflicts_are_refused() {
        assert_eq!(framing_of(&[], 1), Ok(Framing::Length(0)));
        assert_eq!(
            framing_of(&[("Content-Length", "12")], 1),
            Ok(Framing::Length(12))
        );
        assert_eq!(
            framing_of(&[("content-length", "1000000000000")], 1),
            Ok(Framing::TooLarge)
        );
        assert_eq!(
            framing_of(&[("Content-Length", "18446744073709551615")], 1),
            Err(400)
        );
        for bad in ["-1", "abc", "", "1 2", "+5", "0x10", "99999999999999999999"] {
            assert_eq!(framing_of(&[("Content-Length", bad)], 1), Err(400), "{bad}");
        }
        assert_eq!(
            framing_of(&[("Content-Length", "1"), ("Content-Length", "1")], 1),
            Err(400)
        );
        assert_eq!(
            framing_of(
                &[("Content-Length", "1"), ("Transfer-Encoding", "chunked")],
                1
            ),
            Err(400)
        );
        assert_eq!(
            framing_of(&[("Transfer-Encoding", "chunked")], 1),
            Ok(Framing::Chunked)
        );
        assert_eq!(framing_of(&[("Transfer-Encoding", "chunked")], 0), Err(501));
        assert_eq!(
            framing_of(&[("Transfer-Encoding", "gzip, chunked")], 1),
            Err(501)
        );
    }

    #[test]
    fn chunked_bodies_are_joined_and_malformed_ones_refused() {
        let status = |s: Stop| match s {
            Stop::Refuse(r) => Some(r.status()),
            Stop::Close => None,
        };
        let chunked = |raw: &[u8]| read_chunked(&mut SliceSource::new(raw)).map_err(status);
        let ok = b"4\r\nWiki\r\n5;ext=1\r\npedia\r\n0\r\nTrailer: x\r\n\r\n";
        assert_eq!(chunked(ok), Ok(Some(b"Wikipedia".to_vec())));
        assert_eq!(chunked(b"4\r\nWik"), Err(None));
        assert_eq!(chunked(b"zz\r\n"), Err(Some(400)));
        assert_eq!(chunked(b"4\r\nWikiXX\r\n"), Err(Some(400)));
        let huge = b"ffffffffffffffff\r\n";
        assert_eq!(chunked(huge), Ok(None));
        let over = format!("{:x}\r\n", MAX_BODY + 1);
        assert_eq!(chunked(over.as_bytes()), Ok(None));
        let long = vec![b'1'; MAX_CHUNK_LINE + 10];
        assert_eq!(chunked(&long), Err(Some(400)));
    }

    #[test]
    fn responses_never_carry_injected_headers() {
        let r = Response::text(200, "x")
            .with_header("X-Evil", "a\r\nSet-Cookie: y")
            .with_header("Bad Name", "v")
            .with_header("Content-Length", "999");
        let text = String::from_utf8(encode(&r, true, false)).unwrap();
        assert!(
            !text.contains("Set-Cookie") && !text.contains("Bad Name") && !text.contains("999")
        );
        assert!(
            text.contains("Content-Length: 2\r\n") && text.contains("Connection: keep-alive\r\n")
        );
        let not_modified =
            String::from_utf8(encode(&Response::new(304, "x", "body"), false, false)).unwrap();
        assert!(!not_modified.contains("Content-Length") && !not_modified.ends_with("body"));
    }
}
