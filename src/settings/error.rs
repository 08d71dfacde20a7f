//! One refusal at startup, as the operator reads it.

use std::fmt;

use super::specs::flag_of;

/// One refusal at startup. `Display` is the one line the operator reads; it never contains the
/// value of a secret setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    Missing {
        name: &'static str,
        why: &'static str,
    },
    Invalid {
        name: &'static str,
        reason: String,
    },
    UnknownFlag(String),
    FlagWithoutValue(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Missing { name, why } => {
                write!(
                    f,
                    "setting {name} is required{why} (flag -{}=...)",
                    flag_of(name)
                )
            }
            Error::Invalid { name, reason } => write!(f, "setting {name} is invalid: {reason}"),
            Error::UnknownFlag(flag) => write!(f, "unknown flag {flag:?} (see --help)"),
            Error::FlagWithoutValue(flag) => write!(f, "flag {flag:?} needs a value"),
        }
    }
}

impl std::error::Error for Error {}
