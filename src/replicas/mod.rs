//! Several replicas behind one Service, answering every A2A call alike.
//!
//! A replica keeps the tasks it ran in its own memory. When it runs as one of several
//! (`K8S_REPLICA_IP` set: a [`Discovery`] lists the replicas), the task ids it mints name it:
//! `<uuid>.<ip>` with the IP's dots (or colons) written as `-`. A call on a task another replica
//! holds (`GetTask`, `CancelTask`, `SubscribeToTask`, the push-config methods) is relayed to that
//! replica, by its IP, with the caller's own request and credentials, so the replica that holds
//! the task authenticates the caller and applies its scope as if it had been called directly.
//! A relayed call is relayed no further.
//!
//! A task id is the caller's to write, so an id never sends anything anywhere by itself: only
//! an IP the replicas' [`Discovery`] lists right now is relayed to (the list is cached for
//! [`FRESH`], and read again before an IP is called gone). An IP no replica has is a replica
//! that is gone, and its tasks with it: `TaskNotFound` says so.

pub mod discovery;
pub mod relay;

pub use self::discovery::Discovery;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a read list of replicas is trusted.
pub const FRESH: Duration = Duration::from_secs(2);

/// How soon a list is read again for an IP it does not have (a replica just started): any
/// caller can write ids naming any IP, and each must not cost an API call.
pub const REREAD: Duration = Duration::from_millis(250);

/// The header a relayed request carries (the relaying replica's IP): it is answered where it
/// arrives.
pub const RELAYED_BY: &str = "A2A-Relayed-By";

/// Where the replicas are read from ([`Discovery::replicas`], in the controller).
pub type Source = Box<dyn Fn() -> Result<Vec<IpAddr>, String> + Send + Sync>;

/// Where a task named by its id lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// Here (or the id names no replica).
    Here,
    /// On the replica at this address.
    Peer(SocketAddr),
    /// On a replica that is no longer there (its IP).
    Gone(IpAddr),
    /// The replicas cannot be read now (why).
    Unknown(String),
}

pub struct Replicas {
    own: IpAddr,
    port: u16,
    source: Source,
    cache: Mutex<Option<(Instant, Vec<IpAddr>)>>,
}

impl Replicas {
    /// This replica at `own`, all replicas listening on `port`, the replicas read from
    /// `source`.
    pub fn new(own: IpAddr, port: u16, source: Source) -> Replicas {
        Replicas {
            own,
            port,
            source,
            cache: Mutex::new(None),
        }
    }

    /// This replica's IP.
    pub fn own(&self) -> IpAddr {
        self.own
    }

    /// A task id naming this replica, from a unique `base`.
    pub fn task_id(&self, base: &str) -> String {
        format!("{base}.{}", tag(self.own))
    }

    /// Where the task `task_id` lives.
    pub fn locate(&self, task_id: &str) -> Location {
        let Some(ip) = holder(task_id) else {
            return Location::Here;
        };
        if ip == self.own {
            return Location::Here;
        }
        match self.listed(ip) {
            Ok(true) => Location::Peer(SocketAddr::new(ip, self.port)),
            Ok(false) => Location::Gone(ip),
            Err(why) => Location::Unknown(why),
        }
    }

    /// Whether `ip` is a replica now: the cached list first, read again when it is stale,
    /// or when it does not have `ip` and is older than [`REREAD`].
    fn listed(&self, ip: IpAddr) -> Result<bool, String> {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, ips)) = cache.as_ref() {
            let has = ips.contains(&ip);
            if at.elapsed() < FRESH && (has || at.elapsed() < REREAD) {
                return Ok(has);
            }
        }
        let ips = (self.source)()?;
        let found = ips.contains(&ip);
        *cache = Some((Instant::now(), ips));
        Ok(found)
    }

    /// The other replicas now (from a list at most [`FRESH`] old).
    pub fn others(&self) -> Result<Vec<IpAddr>, String> {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let ips = match cache.as_ref() {
            Some((at, ips)) if at.elapsed() < FRESH => ips.clone(),
            _ => {
                let ips = (self.source)()?;
                *cache = Some((Instant::now(), ips.clone()));
                ips
            }
        };
        Ok(ips.into_iter().filter(|ip| *ip != self.own).collect())
    }

    /// Whether `ip` is one of the replicas now.
    pub fn is_replica(&self, ip: IpAddr) -> Result<bool, String> {
        if ip == self.own {
            return Ok(true);
        }
        self.listed(ip)
    }

    /// The address of the replica at `ip`.
    pub fn address(&self, ip: IpAddr) -> SocketAddr {
        SocketAddr::new(ip, self.port)
    }

    /// Forgets the list (a listed replica did not answer).
    pub fn forget(&self) {
        *self.cache.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// An IP as a task id's last part: `10.244.0.5` → `10-244-0-5`, `fd00::5` → `fd00--5`.
pub fn tag(ip: IpAddr) -> String {
    ip.to_string().replace(['.', ':'], "-")
}

/// The replica a task id names, if it names one.
pub fn holder(task_id: &str) -> Option<IpAddr> {
    let (_, tag) = task_id.rsplit_once('.')?;
    parse_tag(tag)
}

/// The IP a [`tag`] writes.
pub fn parse_tag(tag: &str) -> Option<IpAddr> {
    if tag.is_empty() || !tag.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
        return None;
    }
    let parts: Vec<&str> = tag.split('-').collect();
    if parts.len() == 4 && parts.iter().all(|p| !p.is_empty() && p.len() <= 3) {
        if let Ok(v4) = parts.join(".").parse::<Ipv4Addr>() {
            return Some(IpAddr::V4(v4));
        }
    }
    tag.replace('-', ":")
        .parse::<Ipv6Addr>()
        .ok()
        .map(IpAddr::V6)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("an IP")
    }

    #[test]
    fn ids_name_their_replica_and_nothing_else_parses_as_one() {
        let r = Replicas::new(ip("10.244.0.5"), 8080, Box::new(|| Ok(vec![])));
        let id = r.task_id("0b7f6a8e-5b1d-4c43-9d0e-3f2a1b0c9d8e");
        assert_eq!(id, "0b7f6a8e-5b1d-4c43-9d0e-3f2a1b0c9d8e.10-244-0-5");
        assert_eq!(holder(&id), Some(ip("10.244.0.5")));
        let v6 = Replicas::new(ip("fd00::a:5"), 8080, Box::new(|| Ok(vec![])));
        assert_eq!(holder(&v6.task_id("x")), Some(ip("fd00::a:5")));
        for plain in [
            "0b7f6a8e-5b1d-4c43-9d0e-3f2a1b0c9d8e",
            "a.b",
            "x.",
            "x.999-1-1-1",
            "x.10-244-0",
            "x.10-244-0-5 ",
            "x.-",
        ] {
            assert_eq!(holder(plain), None, "{plain:?}");
        }
    }

    #[test]
    fn only_a_listed_replica_is_a_peer_and_the_list_is_read_again_before_one_is_gone() {
        let reads = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&reads);
        let r = Replicas::new(
            ip("10.244.0.5"),
            8080,
            Box::new(move || {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok(vec![ip("10.244.0.5"), ip("10.244.0.6")])
            }),
        );
        assert_eq!(r.locate("t.10-244-0-5"), Location::Here);
        assert_eq!(r.locate("t"), Location::Here);
        assert_eq!(reads.load(Ordering::SeqCst), 0);
        let peer = SocketAddr::new(ip("10.244.0.6"), 8080);
        assert_eq!(r.locate("t.10-244-0-6"), Location::Peer(peer));
        assert_eq!(r.locate("u.10-244-0-6"), Location::Peer(peer));
        assert_eq!(reads.load(Ordering::SeqCst), 1, "a fresh list is reused");
        assert_eq!(
            r.locate("t.169-254-169-254"),
            Location::Gone(ip("169.254.169.254"))
        );
        assert_eq!(
            reads.load(Ordering::SeqCst),
            1,
            "a list just read is not read again"
        );
        std::thread::sleep(REREAD);
        assert_eq!(
            r.locate("t.169-254-169-254"),
            Location::Gone(ip("169.254.169.254"))
        );
        assert_eq!(reads.load(Ordering::SeqCst), 2, "read again before gone");
        for _ in 0..100 {
            r.locate("t.169-254-169-254");
        }
        assert_eq!(
            reads.load(Ordering::SeqCst),
            2,
            "ids naming any IP cost no API calls"
        );
        let broken = Replicas::new(ip("10.244.0.5"), 8080, Box::new(|| Err("forbidden".into())));
        assert_eq!(
            broken.locate("t.10-244-0-6"),
            Location::Unknown("forbidden".into())
        );
    }
}
