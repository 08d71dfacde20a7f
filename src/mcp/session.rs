//! The handshake revisions' `Mcp-Session-Id`, kept by nobody. An `initialize` is answered with
//! an id that says everything a later request needs — the revision it chose — and ends with a
//! check value over that revision, a random nonce and the caller it was given to. Any replica
//! reads it back with nothing in memory: an id it cannot read, or one presented by another
//! caller, is a session it does not know (404, and the client starts a new one).
//!
//! The check value is not a secret's signature: every request is authenticated by its bearer
//! token anyway, and an id a caller forges for itself gains it nothing. It makes a stray or
//! mistyped id (or another caller's) fail as the revision says an unknown session fails.

use crate::hash::sha256;
use crate::token::{hex, random_hex};

/// The nonce's and the check value's lengths, in hex characters.
const NONCE_HEX: usize = 16;
const CHECK_HEX: usize = 24;

/// A session as an id carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The handshake revision it speaks (one of [`super::wire::LEGACY`]).
    pub version: &'static str,
}

/// A new id for `caller_key`'s session speaking `version`.
pub fn mint(version: &'static str, caller_key: &str) -> std::io::Result<String> {
    let nonce = random_hex(NONCE_HEX / 2)?;
    Ok(format!(
        "{version}.{nonce}.{}",
        check(version, &nonce, caller_key)
    ))
}

/// The session `id` names, when it is one minted for `caller_key`.
pub fn read(id: &str, caller_key: &str) -> Option<Session> {
    let mut parts = id.split('.');
    let (version, nonce, given) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || nonce.len() != NONCE_HEX || given.len() != CHECK_HEX {
        return None;
    }
    let version = super::wire::LEGACY.into_iter().find(|v| *v == version)?;
    let expected = check(version, nonce, caller_key);
    crate::token::constant_time_eq(expected.as_bytes(), given.as_bytes())
        .then_some(Session { version })
}

fn check(version: &str, nonce: &str, caller_key: &str) -> String {
    let input = format!("a2a-worker-controller mcp session\0{version}\0{nonce}\0{caller_key}");
    let mut out = hex(&sha256(input.as_bytes()));
    out.truncate(CHECK_HEX);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_reads_back_for_its_caller_only() {
        let id = mint("2025-11-25", "static:alice").unwrap();
        assert_eq!(
            read(&id, "static:alice"),
            Some(Session {
                version: "2025-11-25"
            })
        );
        assert_eq!(read(&id, "static:bob"), None);
        let mut tampered = id.clone();
        tampered.replace_range(11..12, if &id[11..12] == "0" { "1" } else { "0" });
        assert_eq!(read(&tampered, "static:alice"), None);
        assert_eq!(read("whatever", "static:alice"), None);
        assert_eq!(read("", "static:alice"), None);
    }
}
