//! The table of settings: every setting as data (its name, default, help line, whether it is
//! secret, its `--help` section), in `--help` order within each section, one file per kind of
//! setting (`controller`, `workers`, `backends`, `egress`). The types and the lookups over it
//! are `specs.rs`'s.

mod backends;
mod controller;
mod egress;
mod workers;

use super::specs::{flag_of, Spec};

/// Every setting's table, in `--help` order.
const TABLES: &[&[Spec]] = &[
    controller::SPECS,
    workers::SPECS,
    backends::SPECS,
    egress::SPECS,
];

/// Every setting, in `--help` order within its section.
pub(super) fn all() -> impl Iterator<Item = &'static Spec> {
    TABLES.iter().flat_map(|t| t.iter())
}

pub(super) fn spec_of_flag(flag: &str) -> Option<&'static Spec> {
    all().find(|s| flag_of(s.name) == flag)
}

pub(super) fn spec_of_name(name: &str) -> Option<&'static Spec> {
    all().find(|s| s.name == name)
}
