//! How many members a pool that follows demand should hold: the first step of pools that size
//! themselves. The rule reads only what every replica of one controller id sees alike — the
//! times of the template's recent claims, which the engine keeps in the claimed workers'
//! labels — so replicas that look at the same moment want the same size without talking, and
//! the slots' names keep them from ever making more than `max` together.
//!
//! The size is what one member's start would otherwise leave uncovered: claims arrive at a
//! rate (those in the window, over the window), each member takes `ready` to start, so about
//! `rate × ready` claims come while one is being made (Little's law); `headroom` more absorb a
//! burst's first seconds. After `idle_after` without a claim the pool sinks to `min` (which may
//! be 0). A fixed `pool: N` is bounds `{N, N}` and wants N whatever the demand.
//!
//! The pool (`mod.rs`) reads the claim times from the template's workers as the engine lists
//! them (a worker from the pool is listed as created when it was claimed), fills slots until
//! it holds the size wanted, and removes its oldest unclaimed members above it.

use std::time::Duration;

use std::collections::HashMap;

use crate::backend::{Backend, BackendError};
use crate::settings::templates::PoolSize;
use crate::settings::PoolDemand;

/// How demand turns into a size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// The window the claim rate is taken over.
    pub window: Duration,
    /// How long a new member takes to become ready.
    pub ready: Duration,
    /// Members held beyond what the rate needs, while there is demand.
    pub headroom: u32,
    /// With no claim for this long, the pool sinks to its minimum.
    pub idle_after: Duration,
}

impl Rule {
    /// The rule the settings describe, holding one member beyond the rate.
    pub fn of(settings: &PoolDemand) -> Rule {
        Rule {
            window: settings.window,
            ready: settings.member_start,
            headroom: 1,
            idle_after: settings.idle_after,
        }
    }

    /// The members wanted now (`now_ms`), given when the recent claims happened (milliseconds
    /// since the epoch, in any order; a claim stamped after `now_ms`, by a replica whose clock
    /// runs ahead, counts as now).
    pub fn wanted(&self, bounds: PoolSize, claims_ms: &[u64], now_ms: u64) -> u32 {
        if bounds.max <= bounds.min {
            return bounds.min;
        }
        let age = |claim: u64| now_ms.saturating_sub(claim);
        let idle_ms = millis(self.idle_after);
        match claims_ms.iter().map(|c| age(*c)).min() {
            Some(youngest) if youngest < idle_ms => {}
            _ => return bounds.min,
        }
        let window_ms = millis(self.window).max(1);
        let in_window = claims_ms.iter().filter(|c| age(**c) < window_ms).count() as u64;
        // Claims expected while one member starts, rounded up: one claim in the window that a
        // start would miss is one cold create.
        let need = (in_window * millis(self.ready)).div_ceil(window_ms);
        let need = u32::try_from(need).unwrap_or(u32::MAX);
        need.saturating_add(self.headroom)
            .clamp(bounds.min, bounds.max)
    }
}

/// When each template's workers were created (a worker from the pool: claimed), as the engine
/// lists them, in Unix milliseconds, by template: what [`Rule::wanted`] reads.
pub fn creates(backend: &dyn Backend) -> Result<HashMap<String, Vec<u64>>, BackendError> {
    let mut creates: HashMap<String, Vec<u64>> = HashMap::new();
    for w in backend.list()? {
        if let Some(ms) = crate::time::parse_rfc3339_millis(&w.created_at) {
            creates.entry(w.template).or_default().push(ms);
        }
    }
    Ok(creates)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1000;

    fn rule() -> Rule {
        Rule {
            window: Duration::from_secs(60),
            ready: Duration::from_secs(2),
            headroom: 1,
            idle_after: Duration::from_secs(600),
        }
    }

    /// `n` claims spread evenly over the `secs` before `now`.
    fn claims(n: u64, secs: u64, now: u64) -> Vec<u64> {
        (0..n).map(|i| now - (i * secs * S) / n.max(1)).collect()
    }

    #[test]
    fn a_fixed_pool_wants_its_size_whatever_the_demand() {
        let now = 10_000 * S;
        assert_eq!(rule().wanted(PoolSize::fixed(4), &[], now), 4);
        assert_eq!(
            rule().wanted(PoolSize::fixed(4), &claims(600, 60, now), now),
            4
        );
        assert_eq!(
            rule().wanted(PoolSize::fixed(0), &claims(6, 60, now), now),
            0
        );
    }

    #[test]
    fn the_size_follows_the_claim_rate_times_a_start_plus_headroom() {
        let (b, now) = (PoolSize { min: 0, max: 8 }, 10_000 * S);
        // One claim every 2 s, a start of 2 s: one claim per start, and one more held.
        assert_eq!(rule().wanted(b, &claims(30, 60, now), now), 2);
        // Three times the rate (a burst): three per start.
        assert_eq!(rule().wanted(b, &claims(90, 60, now), now), 4);
        // A trickle still keeps one ready, and the headroom.
        assert_eq!(rule().wanted(b, &claims(1, 1, now), now), 2);
        // Never beyond max, never below min.
        assert_eq!(rule().wanted(b, &claims(1_000, 60, now), now), 8);
        let floor = PoolSize { min: 3, max: 8 };
        assert_eq!(rule().wanted(floor, &claims(1, 1, now), now), 3);
    }

    #[test]
    fn with_no_claim_for_the_idle_period_the_pool_sinks_to_its_minimum() {
        let (b, now) = (PoolSize { min: 0, max: 8 }, 10_000 * S);
        assert_eq!(rule().wanted(b, &[], now), 0);
        // The last claim 9 minutes ago: outside the window, inside the idle period: the
        // headroom stays.
        assert_eq!(rule().wanted(b, &[now - 540 * S], now), 1);
        assert_eq!(rule().wanted(b, &[now - 600 * S], now), 0);
        let floor = PoolSize { min: 2, max: 8 };
        assert_eq!(rule().wanted(floor, &[now - 3_600 * S], now), 2);
    }

    #[test]
    fn replicas_reading_the_same_claims_want_the_same_size() {
        let (b, now) = (PoolSize { min: 0, max: 8 }, 10_000 * S);
        let mut seen = claims(45, 60, now);
        let one = rule().wanted(b, &seen, now);
        seen.reverse();
        assert_eq!(
            rule().wanted(b, &seen, now),
            one,
            "the order the engine lists them in"
        );
        // A claim stamped ahead of this replica's clock counts as now.
        assert_eq!(rule().wanted(b, &[now + 5 * S], now), 2);
    }
}
