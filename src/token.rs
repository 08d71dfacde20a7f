//! Secrets: per-worker tokens and identifiers from the operating system's generator, and the
//! constant-time comparison used for bearer tokens.

use std::fmt;
use std::fs::File;
use std::io::{self, Read};

/// Fills `buf` from the operating system's cryptographic generator (`/dev/urandom`, opened
/// once: every request takes an id from it).
pub fn os_random(buf: &mut [u8]) -> io::Result<()> {
    static URANDOM: std::sync::OnceLock<File> = std::sync::OnceLock::new();
    let file = match URANDOM.get() {
        Some(f) => f,
        None => {
            let opened = File::open("/dev/urandom")?;
            URANDOM.get_or_init(|| opened)
        }
    };
    (&*file).read_exact(buf)
}

/// A worker's bearer token: 256 random bits, hex-encoded (64 characters).
///
/// `Debug` and `Display` are redacted so that a token cannot reach a log line or an error
/// message by accident; [`Token::expose`] is the one way to read it.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    pub fn generate() -> io::Result<Token> {
        let mut bytes = [0u8; 32];
        os_random(&mut bytes)?;
        Ok(Token(hex(&bytes)))
    }

    /// Wraps a token that already exists (for instance, the empty token of a local worker).
    pub fn from_secret(secret: String) -> Token {
        Token(secret)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The one-way hash stored with a worker in place of its token: the first
    /// [`TOKEN_HASH_CHARS`] hex characters of the token's SHA-256 (192 bits; a Kubernetes
    /// label value holds at most 63 characters). Knowing it does not give the token (256
    /// random bits); `""` for an empty token (a worker without an endpoint has none to check).
    pub fn hash(&self) -> String {
        token_hash(&self.0)
    }
}

/// How many hex characters of a token's SHA-256 are stored with its worker.
pub const TOKEN_HASH_CHARS: usize = 48;

/// [`Token::hash`] of a presented bearer (`""` for an empty one).
pub fn token_hash(secret: &str) -> String {
    if secret.is_empty() {
        return String::new();
    }
    let mut h = hex(&crate::hash::sha256(secret.as_bytes()));
    h.truncate(TOKEN_HASH_CHARS);
    h
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// A random identifier of `bytes` random bytes, hex-encoded.
pub fn random_hex(bytes: usize) -> io::Result<String> {
    let mut buf = vec![0u8; bytes];
    os_random(&mut buf)?;
    Ok(hex(&buf))
}

/// Random bytes for identifiers, read from the generator [`ID_POOL`] bytes at a time: a
/// watch's snapshot names a thousand messages at once, one read each was a thousand system
/// calls. Tokens never come from here (their bytes are read when made, and held nowhere else).
const ID_POOL: usize = 4096;

fn id_random(out: &mut [u8; 16]) -> io::Result<()> {
    static POOL: std::sync::Mutex<(Vec<u8>, usize)> = std::sync::Mutex::new((Vec::new(), 0));
    let mut pool = POOL.lock().unwrap_or_else(|p| p.into_inner());
    let (bytes, used) = &mut *pool;
    if bytes.len() != ID_POOL || *used + out.len() > ID_POOL {
        bytes.resize(ID_POOL, 0);
        os_random(bytes)?;
        *used = 0;
    }
    let taken = &mut bytes[*used..*used + out.len()];
    out.copy_from_slice(taken);
    // Handed out once: what stays in the pool is only what has not been used.
    taken.fill(0);
    *used += out.len();
    Ok(())
}

/// A random RFC 4122 version-4 UUID, used for task, context, message and artifact ids.
pub fn uuid_v4() -> io::Result<String> {
    let mut b = [0u8; 16];
    id_random(&mut b)?;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex(&b);
    // `join` sizes the string once.
    Ok([&h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32]].join("-"))
}

pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 0xf) as usize] as char);
    }
    out
}

/// Compares two byte strings in time that depends only on their lengths, never on where they
/// first differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_256_bit_hex_and_distinct() {
        let a = Token::generate().unwrap();
        let b = Token::generate().unwrap();
        assert_eq!(a.expose().len(), 64);
        assert!(a.expose().bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
        assert_eq!(format!("{a:?} {a}"), "Token(<redacted>) <redacted>");
    }

    #[test]
    fn a_token_hash_is_a_truncated_sha256_and_empty_for_no_token() {
        let t = Token::from_secret("abc".into());
        assert_eq!(t.hash(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9c");
        assert_eq!(t.hash().len(), TOKEN_HASH_CHARS);
        assert_eq!(Token::from_secret(String::new()).hash(), "");
    }

    #[test]
    fn uuids_are_version_4_with_the_rfc_variant() {
        let u = uuid_v4().unwrap();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
        assert!(matches!(&u[19..20], "8" | "9" | "a" | "b"));
    }

    #[test]
    fn token_comparison_is_exact_and_length_counts() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert!(constant_time_eq(b"", b""));
    }
}
