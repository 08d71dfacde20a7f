//! The status page (`/ui`): static HTML, CSS and one JavaScript file compiled into the binary,
//! no framework, no external resource. The page talks to the controller only through the
//! public A2A API, with the token the person enters; it is served with a strict
//! Content-Security-Policy and validators.

use crate::hash::{fnv1a64, FNV_OFFSET};

/// One file of the page.
pub struct Asset {
    pub content_type: &'static str,
    pub body: &'static str,
    pub etag: String,
}

impl Asset {
    fn new(content_type: &'static str, body: &'static str) -> Asset {
        let etag = format!("\"{:016x}\"", fnv1a64(FNV_OFFSET, body.bytes()));
        Asset {
            content_type,
            body,
            etag,
        }
    }
}

/// No inline script or style, nothing from elsewhere, no framing.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The asset at `path` (`/ui`, `/ui/`, `/ui/app.js`, `/ui/app.css`), if it is one.
pub fn asset(path: &str) -> Option<Asset> {
    Some(match path {
        "/ui" | "/ui/" | "/ui/index.html" => {
            Asset::new("text/html; charset=utf-8", include_str!("index.html"))
        }
        "/ui/app.js" => Asset::new("text/javascript; charset=utf-8", include_str!("app.js")),
        "/ui/app.css" => Asset::new("text/css; charset=utf-8", include_str!("app.css")),
        _ => return None,
    })
}
