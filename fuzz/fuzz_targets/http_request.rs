//! Request heads, body framing and chunked bodies, as the HTTP layer reads them from a socket.
#![no_main]
use a2a_worker_controller::http::wire::{
    check_host, framing, parse_head, read_chunked, read_length, Framing, SliceSource,
};
use a2a_worker_controller::http::MAX_BODY;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(Some((head, len))) = parse_head(data) else { return };
    assert!(len <= data.len());
    let rest = &data[len..];
    if let Err(refusal) = check_host(&head) {
        assert_eq!(refusal.status(), 400);
    }
    match framing(&head) {
        Ok(Framing::Length(n)) => {
            assert!(n <= MAX_BODY);
            if let Ok(body) = read_length(&mut SliceSource::new(rest), n) {
                assert_eq!(body.len(), n);
            }
        }
        Ok(Framing::Chunked) => {
            if let Ok(Some(body)) = read_chunked(&mut SliceSource::new(rest)) {
                assert!(body.len() <= MAX_BODY);
            }
        }
        Ok(Framing::TooLarge) | Err(_) => {}
    }
});
