//! PEM certificate bundles, read for the TLS roots a setting names (the Kubernetes API's CA,
//! the OIDC issuer's).

use ureq::tls::{Certificate, PemItem};

/// Every certificate in a PEM bundle (at least one); other PEM items are skipped.
pub fn certificates(pem: &[u8]) -> Result<Vec<Certificate<'static>>, String> {
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(pem) {
        match item {
            Ok(PemItem::Certificate(c)) => certs.push(c),
            Ok(_) => {}
            Err(e) => return Err(format!("not a PEM certificate bundle ({e})")),
        }
    }
    if certs.is_empty() {
        return Err("it holds no PEM certificate".into());
    }
    Ok(certs)
}

/// The TLS roots setting `setting` gives: the bundle at `ca_file`, else the bundled public
/// roots. A refusal names the setting and the file.
pub fn roots(
    setting: &str,
    ca_file: Option<&std::path::Path>,
) -> Result<ureq::tls::RootCerts, String> {
    let Some(path) = ca_file else {
        return Ok(ureq::tls::RootCerts::WebPki);
    };
    let pem = std::fs::read(path)
        .map_err(|e| format!("{setting} {}: cannot be read: {e}", path.display()))?;
    let certs = certificates(&pem).map_err(|why| format!("{setting} {}: {why}", path.display()))?;
    Ok(ureq::tls::RootCerts::new_with_certs(&certs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_without_certificates_is_refused() {
        assert!(certificates(b"").is_err());
        assert!(
            certificates(b"-----BEGIN CERTIFICATE-----\n%%%\n-----END CERTIFICATE-----\n").is_err()
        );
        assert!(certificates(b"hello").is_err());
    }
}
