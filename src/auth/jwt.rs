//! Signed JWT access tokens (RFC 7519), checked as `A2A_OIDC_*` asks: RS256, PS256, ES256 or
//! EdDSA (Ed25519) only (never `none`, never HMAC: a public key is not a shared secret), the
//! key chosen by `kid`, of the algorithm's own type and, when its JWK names an `alg`, of that
//! one; then `iss`, `aud`, `exp` and `nbf` with a leeway of [`LEEWAY_SECS`].
//! Signatures are ring's. Nothing here touches the network (see `oidc`).

use std::collections::HashMap;
use std::fmt;

use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};
use serde::Deserialize;
use serde_json::Value;

/// How far clocks may disagree (seconds) when `exp` and `nbf` are checked.
pub const LEEWAY_SECS: u64 = 60;

/// A public key from a JWKS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    /// RSA: modulus and exponent, big-endian.
    Rsa { n: Vec<u8>, e: Vec<u8> },
    /// EC P-256: the uncompressed point (0x04 ‖ x ‖ y).
    P256 { point: Vec<u8> },
    /// OKP Ed25519: the 32-byte public key.
    Ed25519 { x: Vec<u8> },
}

/// The keys of a JWKS by `kid` (keys without a `kid`, or of another type, are skipped).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeySet {
    pub keys: HashMap<String, Key>,
    /// The `alg` a key's JWK pins it to, by `kid` (a key without one serves any algorithm of
    /// its type).
    pub algs: HashMap<String, String>,
}

/// The algorithms accepted, as a refusal names them.
pub const ALGORITHMS: &str = "RS256, PS256, ES256 or EdDSA";

/// Why a token is refused (for the log at debug level; the caller only hears 401).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    Malformed(&'static str),
    Algorithm(String),
    UnknownKey,
    WrongKeyType,
    Signature,
    Issuer,
    Audience,
    Expired,
    NotYetValid,
    Claim(&'static str),
}

impl Refusal {
    /// What kind of refusal this is, as a short label (the log's rate limit goes by it).
    pub fn kind(&self) -> &'static str {
        match self {
            Refusal::Malformed(_) => "malformed",
            Refusal::Algorithm(_) => "algorithm",
            Refusal::UnknownKey => "unknown_key",
            Refusal::WrongKeyType => "wrong_key_type",
            Refusal::Signature => "signature",
            Refusal::Issuer => "issuer",
            Refusal::Audience => "audience",
            Refusal::Expired => "expired",
            Refusal::NotYetValid => "not_yet_valid",
            Refusal::Claim(_) => "claim",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Malformed(what) => write!(f, "malformed token: {what}"),
            Refusal::Algorithm(alg) => write!(f, "algorithm {alg:?} is not {ALGORITHMS}"),
            Refusal::UnknownKey => f.write_str("no key with that kid"),
            Refusal::WrongKeyType => {
                f.write_str("the key's type (or its JWK's alg) is not the algorithm's")
            }
            Refusal::Signature => f.write_str("the signature does not verify"),
            Refusal::Issuer => f.write_str("another issuer"),
            Refusal::Audience => f.write_str("another audience"),
            Refusal::Expired => f.write_str("expired"),
            Refusal::NotYetValid => f.write_str("not valid yet"),
            Refusal::Claim(c) => write!(f, "claim {c} missing or not usable"),
        }
    }
}

/// What a checked token says: its subject and the scope claim's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    pub subject: String,
    pub scope: String,
}

/// What a token must match.
pub struct Expect<'a> {
    pub issuer: &'a str,
    pub audience: &'a str,
    pub scope_claim: &'a str,
    /// Unix seconds.
    pub now: u64,
}

#[derive(Deserialize)]
struct Header {
    alg: String,
    #[serde(default)]
    kid: Option<String>,
}

/// A token's header: the `kid` it names (`None`: it names none).
pub fn kid_of(token: &str) -> Result<Option<String>, Refusal> {
    let header = token
        .split('.')
        .next()
        .ok_or(Refusal::Malformed("no header"))?;
    let header: Header = serde_json::from_slice(&base64url(header)?)
        .map_err(|_| Refusal::Malformed("header is not JSON"))?;
    Ok(header.kid)
}

/// Checks `token` against `keys` and `expect`.
pub fn verify(token: &str, keys: &KeySet, expect: &Expect<'_>) -> Result<Claims, Refusal> {
    let mut parts = token.split('.');
    let (Some(h), Some(p), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Refusal::Malformed("not three parts"));
    };
    let header: Header = serde_json::from_slice(&base64url(h)?)
        .map_err(|_| Refusal::Malformed("header is not JSON"))?;
    // The algorithm first: a token of one never accepted is refused without a key lookup
    // (and so without a JWKS fetch for its kid).
    let alg = header.alg.as_str();
    if !matches!(alg, "RS256" | "PS256" | "ES256" | "EdDSA") {
        return Err(Refusal::Algorithm(alg.chars().take(16).collect()));
    }
    let (kid, key) = match &header.kid {
        Some(kid) => keys.keys.get_key_value(kid),
        // No kid: only a JWKS of one key says which.
        None if keys.keys.len() == 1 => keys.keys.iter().next(),
        None => None,
    }
    .ok_or(Refusal::UnknownKey)?;
    if keys.algs.get(kid).is_some_and(|pinned| pinned != alg) {
        return Err(Refusal::WrongKeyType);
    }
    let signed = &token.as_bytes()[..h.len() + 1 + p.len()];
    let sig = base64url(s)?;
    check_signature(alg, key, signed, &sig)?;
    // Only a verified payload is read.
    let claims: serde_json::Map<String, Value> = serde_json::from_slice(&base64url(p)?)
        .map_err(|_| Refusal::Malformed("payload is not a JSON object"))?;
    check_claims(&claims, expect)?;
    let subject = claims
        .get("sub")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty() && s.len() <= 255 && !s.chars().any(char::is_control))
        .ok_or(Refusal::Claim("sub"))?;
    let scope = claims
        .get(expect.scope_claim)
        .and_then(Value::as_str)
        .filter(|s| crate::control::caller::check_scope(s).is_ok())
        .ok_or(Refusal::Claim("scope"))?;
    Ok(Claims {
        subject: subject.to_string(),
        scope: scope.to_string(),
    })
}

/// The signature over `signed`, checked with `key` by `alg` (a key of another type for it is
/// refused).
fn check_signature(alg: &str, key: &Key, signed: &[u8], sig: &[u8]) -> Result<(), Refusal> {
    let checked = match (alg, key) {
        ("RS256", Key::Rsa { n, e }) => RsaPublicKeyComponents { n, e }.verify(
            &signature::RSA_PKCS1_2048_8192_SHA256,
            signed,
            sig,
        ),
        ("PS256", Key::Rsa { n, e }) => RsaPublicKeyComponents { n, e }.verify(
            &signature::RSA_PSS_2048_8192_SHA256,
            signed,
            sig,
        ),
        ("ES256", Key::P256 { point }) => {
            UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point).verify(signed, sig)
        }
        ("EdDSA", Key::Ed25519 { x }) => {
            UnparsedPublicKey::new(&signature::ED25519, x).verify(signed, sig)
        }
        _ => return Err(Refusal::WrongKeyType),
    };
    checked.map_err(|_| Refusal::Signature)
}

/// The verified claims' issuer, audience, expiry and not-before, as expected.
fn check_claims(
    claims: &serde_json::Map<String, Value>,
    expect: &Expect<'_>,
) -> Result<(), Refusal> {
    if claims.get("iss").and_then(Value::as_str) != Some(expect.issuer) {
        return Err(Refusal::Issuer);
    }
    let audience_ok = match claims.get("aud") {
        Some(Value::String(a)) => a == expect.audience,
        Some(Value::Array(list)) => list.iter().any(|a| a.as_str() == Some(expect.audience)),
        _ => false,
    };
    if !audience_ok {
        return Err(Refusal::Audience);
    }
    let exp = seconds(claims.get("exp")).ok_or(Refusal::Claim("exp"))?;
    if expect.now >= exp.saturating_add(LEEWAY_SECS) {
        return Err(Refusal::Expired);
    }
    if let Some(nbf) = claims.get("nbf") {
        let nbf = seconds(Some(nbf)).ok_or(Refusal::Claim("nbf"))?;
        if expect.now.saturating_add(LEEWAY_SECS) < nbf {
            return Err(Refusal::NotYetValid);
        }
    }
    Ok(())
}

/// A NumericDate: whole (or fractional, cut) seconds, not negative.
fn seconds(v: Option<&Value>) -> Option<u64> {
    let v = v?;
    v.as_u64().or_else(|| {
        v.as_f64()
            .filter(|f| f.is_finite() && *f >= 0.0)
            .map(|f| f as u64)
    })
}

/// Reads a JWKS document; keys that are not RSA, EC P-256 or OKP Ed25519 with a `kid`, or
/// whose `use` is not `sig`, are skipped.
pub fn key_set(jwks: &[u8]) -> Result<KeySet, String> {
    #[derive(Deserialize)]
    struct Doc {
        keys: Vec<Jwk>,
    }
    #[derive(Deserialize)]
    struct Jwk {
        kty: String,
        #[serde(default)]
        kid: Option<String>,
        #[serde(default, rename = "use")]
        usage: Option<String>,
        #[serde(default)]
        alg: Option<String>,
        #[serde(default)]
        n: Option<String>,
        #[serde(default)]
        e: Option<String>,
        #[serde(default)]
        crv: Option<String>,
        #[serde(default)]
        x: Option<String>,
        #[serde(default)]
        y: Option<String>,
    }
    let doc: Doc =
        serde_json::from_slice(jwks).map_err(|e| format!("the JWKS is not a key set: {e}"))?;
    let mut set = KeySet::default();
    for k in doc.keys {
        if k.usage.as_deref().is_some_and(|u| u != "sig") {
            continue;
        }
        let Some(kid) = k.kid else { continue };
        let decoded = |v: &Option<String>| v.as_deref().and_then(|s| base64url(s).ok());
        let key = match (k.kty.as_str(), k.crv.as_deref()) {
            ("RSA", _) => match (decoded(&k.n), decoded(&k.e)) {
                (Some(n), Some(e)) => Key::Rsa { n, e },
                _ => continue,
            },
            ("EC", Some("P-256")) => match (decoded(&k.x), decoded(&k.y)) {
                (Some(x), Some(y)) if x.len() == 32 && y.len() == 32 => {
                    let mut point = vec![4u8];
                    point.extend(x);
                    point.extend(y);
                    Key::P256 { point }
                }
                _ => continue,
            },
            ("OKP", Some("Ed25519")) => match decoded(&k.x) {
                Some(x) if x.len() == 32 => Key::Ed25519 { x },
                _ => continue,
            },
            _ => continue,
        };
        if let Some(alg) = k.alg {
            set.algs.insert(kid.clone(), alg);
        }
        set.keys.insert(kid, key);
    }
    Ok(set)
}

/// Base64url without padding (RFC 7515 §2); padding, if sent, is allowed.
pub fn base64url(text: &str) -> Result<Vec<u8>, Refusal> {
    let text = text.trim_end_matches('=');
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for b in text.bytes() {
        let v = match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'-' => 62,
            b'_' => 63,
            _ => return Err(Refusal::Malformed("not base64url")),
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    if bits >= 6 {
        return Err(Refusal::Malformed("not base64url"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64url_round_trips_known_values() {
        assert_eq!(base64url("").unwrap(), b"");
        assert_eq!(base64url("Zg").unwrap(), b"f");
        assert_eq!(base64url("Zm8").unwrap(), b"fo");
        assert_eq!(base64url("Zm9v").unwrap(), b"foo");
        assert_eq!(base64url("Zm9vYg==").unwrap(), b"foob");
        assert_eq!(base64url("-_8").unwrap(), [0xfb, 0xff]);
        assert!(base64url("Z").is_err() && base64url("a+b").is_err());
    }

    #[test]
    fn refuses_what_is_not_an_accepted_algorithm_before_any_claim() {
        let keys = KeySet {
            keys: [(
                "k".to_string(),
                Key::Rsa {
                    n: vec![1; 256],
                    e: vec![1, 0, 1],
                },
            )]
            .into(),
            algs: Default::default(),
        };
        let expect = Expect {
            issuer: "https://i",
            audience: "a",
            scope_claim: "tenant",
            now: 0,
        };
        let b = |v: &str| {
            let mut s = String::new();
            for chunk in v.as_bytes().chunks(3) {
                let n = chunk.iter().fold(0u32, |a, b| (a << 8) | u32::from(*b))
                    << (8 * (3 - chunk.len()));
                const A: &[u8] =
                    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
                for i in 0..=chunk.len() {
                    s.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
                }
            }
            s
        };
        let payload =
            b(r#"{"iss":"https://i","aud":"a","exp":99999999999,"sub":"x","tenant":"t"}"#);
        for (alg, refusal) in [
            ("none", Refusal::Algorithm("none".into())),
            ("HS256", Refusal::Algorithm("HS256".into())),
            ("ES256", Refusal::WrongKeyType),
            ("EdDSA", Refusal::WrongKeyType),
            ("PS384", Refusal::Algorithm("PS384".into())),
            ("PS256", Refusal::Signature),
        ] {
            let header = b(&format!(r#"{{"alg":"{alg}","kid":"k"}}"#));
            let token = format!("{header}.{payload}.");
            assert_eq!(verify(&token, &keys, &expect), Err(refusal), "{alg}");
        }
        // A key its JWK pins to RS256 serves no other algorithm.
        let mut pinned = keys.clone();
        pinned.algs.insert("k".into(), "RS256".into());
        let header = b(r#"{"alg":"PS256","kid":"k"}"#);
        assert_eq!(
            verify(&format!("{header}.{payload}."), &pinned, &expect),
            Err(Refusal::WrongKeyType)
        );
        let header = b(r#"{"alg":"RS256","kid":"other"}"#);
        assert_eq!(
            verify(&format!("{header}.{payload}.AA"), &keys, &expect),
            Err(Refusal::UnknownKey)
        );
        assert!(matches!(
            verify("a.b", &keys, &expect),
            Err(Refusal::Malformed(_))
        ));
    }
}
