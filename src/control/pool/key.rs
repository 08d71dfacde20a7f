//! The pool key: what members' activation secrets are derived from (with each member's name
//! and nonce), so any replica with the key opens any member and nothing secret is kept or
//! labelled. It comes from `POOL_KEY_FILE`, else from the admin token.

use ring::hmac;

use crate::secret_file::read_secret_file;
use crate::settings::Settings;
use crate::token::{self, Token};

/// The key members' activation secrets come from, and its id (in labels; not the key).
#[derive(Clone)]
pub struct PoolKey {
    key: hmac::Key,
    pub(super) id: String,
}

impl PoolKey {
    /// A key of `secret`'s bytes (`POOL_KEY_FILE`).
    pub fn new(secret: &[u8]) -> PoolKey {
        let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
        let id = token::hex(&hmac::sign(&key, b"a2a-worker-controller pool key id").as_ref()[..8]);
        PoolKey { key, id }
    }

    /// A key derived from the admin token (`A2A_AUTH_TOKEN`), which every replica of one
    /// controller id has.
    pub fn derived_from(admin_token: &str) -> PoolKey {
        let outer = hmac::Key::new(hmac::HMAC_SHA256, admin_token.as_bytes());
        PoolKey::new(hmac::sign(&outer, b"a2a-worker-controller pool key").as_ref())
    }

    /// The key the settings give, and where it came from: `POOL_KEY_FILE`, else derived from
    /// `A2A_AUTH_TOKEN`; `None` with neither (a pooled template is refused). An unusable
    /// file is one line naming the setting.
    pub fn from_settings(settings: &Settings) -> Result<Option<(PoolKey, String)>, String> {
        if let Some(path) = &settings.pool_key_file {
            let (key, _) = read_secret_file(path)
                .map_err(|why| format!("setting POOL_KEY_FILE is invalid: {why}"))?;
            if key.chars().count() < 16 {
                return Err(format!(
                    "setting POOL_KEY_FILE is invalid: {} holds fewer than 16 characters",
                    path.display()
                ));
            }
            return Ok(Some((
                PoolKey::new(key.as_bytes()),
                format!("POOL_KEY_FILE {}", path.display()),
            )));
        }
        Ok(settings.auth_token.as_deref().map(|t| {
            (
                PoolKey::derived_from(t),
                "derived from A2A_AUTH_TOKEN".to_string(),
            )
        }))
    }

    /// Its id: 16 hex digits that say which key, and nothing of it.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Member `name`'s activation secret (with its `nonce`).
    pub fn secret(&self, name: &str, nonce: &str) -> Token {
        let tag = hmac::sign(
            &self.key,
            format!("a2a-pool-member\n{name}\n{nonce}").as_bytes(),
        );
        Token::from_secret(token::hex(tag.as_ref()))
    }
}
