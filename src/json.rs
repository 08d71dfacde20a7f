//! JSON text written into one buffer of about its final size. serde_json's `to_string` and
//! `to_raw_value` grow theirs from 128 bytes by doubling: a 30-worker list's reply (7.8 KB)
//! left six freed blocks of rising size behind per request, and with 256 clients at once glibc
//! kept them (peak 64 MiB; 44 MiB sized). `hint` is what the caller knows of the size (a
//! task's reply data, a worker count); a small reply needs none.

use serde::Serialize;
use serde_json::value::RawValue;

/// Room for what a reply holds besides the part its `hint` counts (ids, status, envelope).
const OVERHEAD: usize = 1024;

/// `value` as JSON text, written into a buffer made for about `hint` bytes and more.
pub fn to_string_sized<T: Serialize + ?Sized>(
    value: &T,
    hint: usize,
) -> serde_json::Result<String> {
    let mut out = Vec::new();
    append_sized(value, hint, &mut out)?;
    // serde_json writes UTF-8 only.
    String::from_utf8(out).map_err(serde::ser::Error::custom)
}

/// `value` as JSON text appended to `out`, with room made first for about `hint` bytes and
/// more (a stream's events written together share one buffer).
pub fn append_sized<T: Serialize + ?Sized>(
    value: &T,
    hint: usize,
    out: &mut Vec<u8>,
) -> serde_json::Result<()> {
    out.reserve(OVERHEAD + hint + hint / 8);
    serde_json::to_writer(out, value)
}

/// [`to_string_sized`] as a raw value (checked to be JSON once more, as `RawValue` wants).
pub fn to_raw_sized<T: Serialize + ?Sized>(
    value: &T,
    hint: usize,
) -> serde_json::Result<Box<RawValue>> {
    RawValue::from_string(to_string_sized(value, hint)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_text_as_serde_json() {
        let v = serde_json::json!({"workers": [{"id": "a\"b", "n": 1}], "ok": true});
        assert_eq!(to_string_sized(&v, 0).unwrap(), v.to_string());
        assert_eq!(to_raw_sized(&v, 10_000).unwrap().get(), v.to_string());
        let mut out = b"data: ".to_vec();
        append_sized(&v, 0, &mut out).unwrap();
        assert_eq!(out, format!("data: {v}").into_bytes());
    }
}
