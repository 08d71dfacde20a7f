//! Standard base64 decoding (a Kubernetes Secret's `data`, an MCP header's `=?base64?...?=`).
//! JWTs' base64url is `auth::jwt`'s.

/// Standard base64 (RFC 4648 §4), padding optional; `None` for anything else.
pub fn decode(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let bytes: Vec<u8> = text.bytes().filter(|b| *b != b'=').collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            n |= value(*c)? << (18 - 6 * i);
        }
        let take = match chunk.len() {
            4 => 3,
            3 => 2,
            2 => 1,
            _ => return None,
        };
        out.extend_from_slice(&n.to_be_bytes()[1..=take]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_reads_back_and_refuses_what_is_not() {
        assert_eq!(decode("aGVsbG8=").as_deref(), Some(&b"hello"[..]));
        assert_eq!(decode("aGk").as_deref(), Some(&b"hi"[..]));
        assert_eq!(decode("").as_deref(), Some(&b""[..]));
        assert_eq!(decode("a"), None);
        assert_eq!(decode("a*=="), None);
    }
}
