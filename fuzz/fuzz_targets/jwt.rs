//! Access tokens and key sets as an attacker would send them: `jwt::verify` over any bytes
//! never panics and never accepts (no input here is signed by the keys it is checked
//! against), and `jwt::key_set` reads any document without panicking.
#![no_main]
use a2a_worker_controller::auth::jwt::{self, Expect, Key, KeySet};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut keys = KeySet::default();
    keys.keys.insert(
        "rsa-1".into(),
        Key::Rsa {
            n: vec![0xc5; 256],
            e: vec![1, 0, 1],
        },
    );
    let mut point = vec![4u8];
    point.extend([7u8; 64]);
    keys.keys.insert("ec-1".into(), Key::P256 { point });
    let expect = Expect {
        issuer: "https://id.example",
        audience: "a2a",
        scope_claim: "tenant",
        now: 1_800_000_000,
    };
    assert!(jwt::verify(text, &keys, &expect).is_err(), "accepted {text:?}");
    let _ = jwt::kid_of(text);
    let _ = jwt::key_set(data);
    let _ = jwt::base64url(text);
});
