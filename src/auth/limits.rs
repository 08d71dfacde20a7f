//! What one caller may hold at once: requests in flight (`MAX_CALLER_REQUESTS`) and open
//! streams (`MAX_CALLER_STREAMS`; watches, streamed sends, subscriptions), the admin caller
//! its own (`MAX_ADMIN_REQUESTS`, `MAX_ADMIN_STREAMS`). Beyond them a request is refused at
//! once, before anything of it runs, so one caller's flood never holds what the others need.
//! A place is held by a [`Slot`] and given back when it drops (a stream's when it ends).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use crate::control::Caller;

/// A caller's bounds (0 = none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub requests: usize,
    pub streams: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Request,
    Stream,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Request => "request",
            Kind::Stream => "stream",
        }
    }
}

/// Why a caller was refused: its bound of `kind`, reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub caller: String,
    pub kind: Kind,
    pub bound: usize,
    pub setting: &'static str,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            Kind::Request => "requests in flight",
            Kind::Stream => "streams open",
        };
        write!(
            f,
            "caller {} has {} {what} already ({}): retry when one ends",
            self.caller, self.bound, self.setting
        )
    }
}

/// The places every caller holds now, by its key.
pub struct CallerLimits {
    callers: Bounds,
    admin: Bounds,
    held: Mutex<HashMap<(String, Kind), usize>>,
}

/// One place held; given back on drop.
pub struct Slot {
    limits: Arc<CallerLimits>,
    key: (String, Kind),
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = self.limits.lock();
        if let Some(n) = held.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.key);
            }
        }
    }
}

impl CallerLimits {
    pub fn new(callers: Bounds, admin: Bounds) -> Arc<CallerLimits> {
        Arc::new(CallerLimits {
            callers,
            admin,
            held: Mutex::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, Kind), usize>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A place of `kind` for `caller`, or why not.
    pub fn take(self: &Arc<Self>, caller: &Caller, kind: Kind) -> Result<Slot, Refused> {
        let (bounds, prefix) = if caller.admin {
            (self.admin, "MAX_ADMIN")
        } else {
            (self.callers, "MAX_CALLER")
        };
        let (bound, setting) = match (kind, prefix) {
            (Kind::Request, "MAX_ADMIN") => (bounds.requests, "MAX_ADMIN_REQUESTS"),
            (Kind::Stream, "MAX_ADMIN") => (bounds.streams, "MAX_ADMIN_STREAMS"),
            (Kind::Request, _) => (bounds.requests, "MAX_CALLER_REQUESTS"),
            (Kind::Stream, _) => (bounds.streams, "MAX_CALLER_STREAMS"),
        };
        let key = (caller.key.clone(), kind);
        let mut held = self.lock();
        let n = held.entry(key.clone()).or_default();
        if bound > 0 && *n >= bound {
            if *n == 0 {
                held.remove(&key);
            }
            return Err(Refused {
                caller: caller.name.clone(),
                kind,
                bound,
                setting,
            });
        }
        *n += 1;
        Ok(Slot {
            limits: Arc::clone(self),
            key,
        })
    }

    /// Places held now, all callers together (for tests and the status line).
    pub fn held(&self) -> usize {
        self.lock().values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(name: &str, admin: bool) -> Caller {
        let mut c = if admin {
            Caller::admin()
        } else {
            Caller::oidc(name, "s")
        };
        c.name = name.into();
        c
    }

    #[test]
    fn each_caller_has_its_own_places_and_gets_them_back() {
        let limits = CallerLimits::new(
            Bounds {
                requests: 2,
                streams: 1,
            },
            Bounds {
                requests: 3,
                streams: 0,
            },
        );
        let (a, b, root) = (
            caller("a", false),
            caller("b", false),
            caller("admin", true),
        );
        let one = limits.take(&a, Kind::Request).unwrap();
        let _two = limits.take(&a, Kind::Request).unwrap();
        let refused = limits.take(&a, Kind::Request).err().unwrap();
        assert_eq!(refused.setting, "MAX_CALLER_REQUESTS");
        assert_eq!(
            refused.to_string(),
            "caller a has 2 requests in flight already (MAX_CALLER_REQUESTS): retry when one ends"
        );
        // Another caller, and a's streams, are untouched by a's requests.
        let _b = limits.take(&b, Kind::Request).unwrap();
        let _s = limits.take(&a, Kind::Stream).unwrap();
        assert!(limits.take(&a, Kind::Stream).is_err());
        drop(one);
        let _again = limits.take(&a, Kind::Request).unwrap();
        // The admin's own bounds; 0 is none.
        for _ in 0..3 {
            std::mem::forget(limits.take(&root, Kind::Request).unwrap());
        }
        assert_eq!(
            limits.take(&root, Kind::Request).err().unwrap().setting,
            "MAX_ADMIN_REQUESTS"
        );
        let streams: Vec<Slot> = (0..100)
            .map(|_| limits.take(&root, Kind::Stream).unwrap())
            .collect();
        drop(streams);
        assert_eq!(limits.held(), 3 + 2 + 1 + 1);
    }
}
