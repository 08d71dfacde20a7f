//! One look at the pools, decided without the engine: given the members the engine lists,
//! which stay (ready, or still starting or being claimed), which are removed and why, which
//! slots are taken, and what is counted. `mod.rs` applies it (removes, records, refills).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{revision, PoolStatus};
use crate::backend::labels;
use crate::backend::{MemberState, PoolMember, Template};
use crate::settings::templates::Templates;

/// One pooled template now: its revision, its slots' names (`0..max`), and how many members
/// it should hold (its fixed size, or what the demand asks for).
pub(super) struct Pooled<'a> {
    pub template: &'a Arc<Template>,
    pub revision: String,
    pub slots: Vec<String>,
    pub size: u32,
}

/// The pooled templates now.
pub(super) struct Wanted<'a>(HashMap<&'a str, Pooled<'a>>);

impl<'a> Wanted<'a> {
    /// Every template with a pool, its revision, every slot's name now (a member elsewhere is
    /// drained), and its size: `size(t)` for one that follows the demand.
    pub fn of(
        templates: &'a Templates,
        controller_id: &str,
        size: impl Fn(&Template) -> u32,
    ) -> Wanted<'a> {
        Wanted(
            templates
                .all()
                .filter(|t| t.pool.is_kept())
                .map(|t| {
                    let revision = revision(t);
                    let slots = (0..t.pool.max)
                        .map(|slot| labels::member_name(controller_id, &t.name, &revision, slot))
                        .collect();
                    let size = if t.pool.follows_demand() {
                        size(t).clamp(t.pool.min, t.pool.max)
                    } else {
                        t.pool.max
                    };
                    let pooled = Pooled {
                        template: t,
                        revision,
                        slots,
                        size,
                    };
                    (t.name.as_str(), pooled)
                })
                .collect(),
        )
    }

    /// Whether template `name` keeps a pool.
    pub fn has(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }

    /// Each pooled template.
    pub fn iter(&self) -> impl Iterator<Item = &Pooled<'a>> + '_ {
        self.0.values()
    }

    /// Whether `m` is of a pooled template's current revision and key, in one of its slots.
    fn current(&self, m: &PoolMember, key_id: &str) -> bool {
        m.key_id == key_id
            && self
                .0
                .get(m.template.as_str())
                .is_some_and(|p| p.revision == m.revision && p.slots.contains(&m.name))
    }
}

/// What the pool remembers between looks.
pub(super) struct Seen {
    /// When each claim that did not finish (by engine id) was first seen.
    pub stuck_since: HashMap<String, Instant>,
    /// When a claim first lost a member that is still unclaimed (by engine id).
    pub lost_since: HashMap<String, Instant>,
    pub now: Instant,
    /// How long a member may stay starting, half-claimed or lost before it is removed.
    pub stuck_after: Duration,
    /// Members a create here is claiming now (by engine id): never removed by a shrink.
    pub claiming: HashSet<String>,
}

/// What one look decided.
#[derive(Debug, Default)]
pub(super) struct Plan {
    /// Members ready to be claimed, by template, oldest first.
    pub ready: HashMap<String, Vec<PoolMember>>,
    /// The slots a member holds (ready or starting).
    pub taken: HashSet<String>,
    /// Members held (ready or starting) by template, after the removals.
    pub held: HashMap<String, u32>,
    /// Members to remove, and why.
    pub remove: Vec<(PoolMember, &'static str)>,
    /// Starting and claiming members that stay, by template.
    pub kept: Vec<(String, &'static str)>,
    pub still_stuck: HashMap<String, Instant>,
    pub still_lost: HashMap<String, Instant>,
}

/// Decides what becomes of each member, oldest first: of two members in one slot (two
/// replicas filled it at once on an engine whose names are not the slots, Kubernetes), the
/// older stays.
pub(super) fn plan(
    mut members: Vec<PoolMember>,
    key_id: &str,
    wanted: &Wanted<'_>,
    seen: &Seen,
) -> Plan {
    members.sort_by(|a, b| (a.created_ms, &a.id).cmp(&(b.created_ms, &b.id)));
    let mut plan = Plan::default();
    for m in members {
        let current = wanted.current(&m, key_id);
        match m.state {
            MemberState::Ended => plan.remove.push((m, "it ended")),
            MemberState::Starting | MemberState::Ready
                if current && plan.taken.contains(&m.name) =>
            {
                plan.remove
                    .push((m, "its slot has an older member (filled twice at once)"))
            }
            MemberState::Claiming | MemberState::Starting => {
                let since = *seen.stuck_since.get(&m.id).unwrap_or(&seen.now);
                if seen.now.duration_since(since) > seen.stuck_after {
                    plan.remove
                        .push((m, "it was left half-claimed or never started"));
                } else {
                    if m.state == MemberState::Starting && current {
                        plan.taken.insert(m.name.clone());
                    }
                    plan.kept.push((m.template.clone(), m.state.as_str()));
                    plan.still_stuck.insert(m.id.clone(), since);
                }
            }
            MemberState::Ready if !current => plan
                .remove
                .push((m, "its template, revision or pool key changed")),
            MemberState::Ready => match seen.lost_since.get(&m.id) {
                Some(since) if seen.now.duration_since(*since) > seen.stuck_after => plan
                    .remove
                    .push((m, "it was activated by a claim that never finished")),
                lost => {
                    if let Some(since) = lost {
                        plan.still_lost.insert(m.id.clone(), *since);
                    }
                    plan.taken.insert(m.name.clone());
                    plan.ready.entry(m.template.clone()).or_default().push(m);
                }
            },
        }
    }
    plan.shrink(wanted, seen);
    plan
}

impl Plan {
    /// Counts what each template holds, and removes the oldest ready members of a template
    /// that holds more than its size (the demand fell): never one being claimed here, and
    /// never a starting one (it is counted, and the next look decides).
    fn shrink(&mut self, wanted: &Wanted<'_>, seen: &Seen) {
        for p in wanted.iter() {
            let held = p.slots.iter().filter(|s| self.taken.contains(*s)).count() as u32;
            let mut over = held.saturating_sub(p.size);
            let name = &p.template.name;
            if over > 0 {
                if let Some(ready) = self.ready.get_mut(name) {
                    let mut kept = Vec::with_capacity(ready.len());
                    for m in ready.drain(..) {
                        if over > 0 && !seen.claiming.contains(&m.id) {
                            over -= 1;
                            self.taken.remove(&m.name);
                            self.still_lost.remove(&m.id);
                            self.remove
                                .push((m, "the pool shrinks with the demand (oldest first)"));
                        } else {
                            kept.push(m);
                        }
                    }
                    *ready = kept;
                }
            }
            let held = p.slots.iter().filter(|s| self.taken.contains(*s)).count() as u32;
            self.held.insert(name.clone(), held);
        }
    }

    /// How many members template `p` should start now: what it lacks of its size, into its
    /// free slots, lowest first.
    pub fn to_start<'s>(&self, p: &'s Pooled<'_>, at_most: usize) -> Vec<&'s String> {
        let held = self.held.get(&p.template.name).copied().unwrap_or(0);
        let lacking = p.size.saturating_sub(held) as usize;
        p.slots
            .iter()
            .filter(|name| !self.taken.contains(*name))
            .take(lacking.min(at_most))
            .collect()
    }

    /// What stays, counted by template and state (what is removed now is gone after this
    /// look); every state of every pooled template is present, zero or not.
    pub fn counts(&self, wanted: &Wanted<'_>) -> BTreeMap<(String, &'static str), u64> {
        let mut counts: BTreeMap<(String, &'static str), u64> = BTreeMap::new();
        for m in self.ready.values().flatten() {
            *counts.entry((m.template.clone(), "ready")).or_default() += 1;
        }
        for (template, state) in &self.kept {
            *counts.entry((template.clone(), *state)).or_default() += 1;
        }
        for t in wanted.0.keys() {
            for state in ["ready", "starting", "claiming", "ended"] {
                counts.entry((t.to_string(), state)).or_default();
            }
        }
        counts
    }

    /// Each pooled template's size, ready and starting members, by name.
    pub fn status(&self, wanted: &Wanted<'_>) -> Vec<PoolStatus> {
        let counts = self.counts(wanted);
        let mut status: Vec<PoolStatus> = wanted
            .iter()
            .map(|p| PoolStatus {
                template: p.template.name.clone(),
                size: p.size,
                min: p.template.pool.min,
                max: p.template.pool.max,
                ready: self
                    .ready
                    .get(&p.template.name)
                    .map_or(0, |r| r.len() as u32),
                starting: counts
                    .get(&(p.template.name.clone(), MemberState::Starting.as_str()))
                    .map_or(0, |n| *n as u32),
            })
            .collect();
        status.sort_by(|a, b| a.template.cmp(&b.template));
        status
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::templates::TemplatesFile;

    fn templates(pool: u32) -> Arc<Templates> {
        sized(crate::settings::templates::PoolSize::fixed(pool))
    }

    fn sized(pool: crate::settings::templates::PoolSize) -> Arc<Templates> {
        let mut t = Template::new("coder", "img", 8080);
        t.pool = pool;
        TemplatesFile::fixed(t, Box::new(|_: &Template| Ok(())))
            .unwrap()
            .current()
    }

    fn member(wanted: &Wanted<'_>, slot: usize, state: MemberState, created_ms: u64) -> PoolMember {
        let p = wanted.iter().next().unwrap();
        PoolMember {
            name: p.slots[slot].clone(),
            id: format!("id-{slot}-{created_ms}"),
            address: String::new(),
            template: p.template.name.clone(),
            revision: p.revision.clone(),
            key_id: "key".into(),
            nonce: "n".into(),
            state,
            created_ms,
        }
    }

    fn seen(now: Instant) -> Seen {
        Seen {
            stuck_since: HashMap::new(),
            lost_since: HashMap::new(),
            now,
            stuck_after: Duration::from_secs(60),
            claiming: HashSet::new(),
        }
    }

    #[test]
    fn the_older_of_two_in_one_slot_stays_and_ended_or_stale_members_go() {
        let templates = templates(3);
        let wanted = Wanted::of(&templates, "ctl", |_| 0);
        let now = Instant::now();
        let mut stale = member(&wanted, 2, MemberState::Ready, 1);
        stale.revision = "old".into();
        let members = vec![
            member(&wanted, 0, MemberState::Ready, 20),
            member(&wanted, 0, MemberState::Ready, 10),
            member(&wanted, 1, MemberState::Ended, 5),
            stale,
        ];
        let plan = plan(members, "key", &wanted, &seen(now));
        let ready = &plan.ready["coder"];
        assert_eq!(ready.len(), 1);
        assert_eq!(ready[0].created_ms, 10, "the older stays");
        let why: Vec<&str> = plan.remove.iter().map(|(_, why)| *why).collect();
        assert_eq!(
            why,
            [
                "its template, revision or pool key changed",
                "it ended",
                "its slot has an older member (filled twice at once)"
            ]
        );
        assert_eq!(plan.taken.len(), 1);
        let counts = plan.counts(&wanted);
        assert_eq!(counts[&("coder".to_string(), "ready")], 1);
        assert_eq!(
            counts[&("coder".to_string(), "ended")],
            0,
            "every state present"
        );
        let status = plan.status(&wanted);
        assert_eq!(
            (status[0].size, status[0].ready, status[0].starting),
            (3, 1, 0)
        );
    }

    #[test]
    fn a_member_stuck_or_lost_past_its_time_goes_and_one_within_it_stays() {
        let templates = templates(2);
        let wanted = Wanted::of(&templates, "ctl", |_| 0);
        let now = Instant::now();
        let long_ago = now - Duration::from_secs(120);
        let claiming = member(&wanted, 0, MemberState::Claiming, 1);
        let lost = member(&wanted, 1, MemberState::Ready, 2);
        let mut s = seen(now);
        s.stuck_since.insert(claiming.id.clone(), long_ago);
        s.lost_since.insert(lost.id.clone(), long_ago);
        let decided = plan(vec![claiming.clone(), lost.clone()], "key", &wanted, &s);
        let why: Vec<&str> = decided.remove.iter().map(|(_, why)| *why).collect();
        assert_eq!(
            why,
            [
                "it was left half-claimed or never started",
                "it was activated by a claim that never finished"
            ]
        );
        // Within their time they stay, and what was seen of them is kept.
        let mut s = seen(now);
        s.stuck_since.insert(claiming.id.clone(), now);
        s.lost_since.insert(lost.id.clone(), now);
        let decided = plan(vec![claiming.clone(), lost.clone()], "key", &wanted, &s);
        assert!(decided.remove.is_empty());
        assert!(decided.still_stuck.contains_key(&claiming.id));
        assert!(decided.still_lost.contains_key(&lost.id));
        assert_eq!(decided.kept, [("coder".to_string(), "claiming")]);
    }

    #[test]
    fn a_pool_above_its_size_removes_its_oldest_ready_members_never_one_being_claimed() {
        let templates = sized(crate::settings::templates::PoolSize { min: 0, max: 6 });
        let wanted = Wanted::of(&templates, "ctl", |_| 2);
        let now = Instant::now();
        let members: Vec<PoolMember> = (0..4)
            .map(|slot| member(&wanted, slot, MemberState::Ready, 10 + slot as u64))
            .chain([member(&wanted, 4, MemberState::Starting, 1)])
            .collect();
        let mut s = seen(now);
        // The oldest ready one is being claimed here.
        s.claiming.insert(members[0].id.clone());
        let decided = plan(members.clone(), "key", &wanted, &s);
        let removed: Vec<u64> = decided.remove.iter().map(|(m, _)| m.created_ms).collect();
        assert_eq!(
            removed,
            [11, 12, 13],
            "oldest first, the claimed one passed over"
        );
        assert!(decided
            .remove
            .iter()
            .all(|(_, why)| *why == "the pool shrinks with the demand (oldest first)"));
        assert_eq!(
            decided.held["coder"], 2,
            "the claimed one and the starting one"
        );
        let p = wanted.iter().next().unwrap();
        assert!(decided.to_start(p, 2).is_empty());
        // Grown again: the free slots are filled lowest first, at most as many as asked at once.
        let wanted = Wanted::of(&templates, "ctl", |_| 6);
        let decided = plan(members, "key", &wanted, &seen(now));
        assert!(decided.remove.is_empty());
        let p = wanted.iter().next().unwrap();
        assert_eq!(decided.to_start(p, 2), [&p.slots[5]]);
        // Never beyond max, whatever the demand says.
        let wanted = Wanted::of(&templates, "ctl", |_| 100);
        assert_eq!(wanted.iter().next().unwrap().size, 6);
    }
}
