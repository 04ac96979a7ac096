//! Names and identifiers. A [`KernelName`] becomes a directory name on the
//! sandbox, so it is validated here once, at the edge, and refused with an
//! error that says what is allowed.

use serde::{Deserialize, Deserializer, Serialize};
use std::fmt;

/// A kernel's name: 1–64 characters of `[A-Za-z0-9_.-]`, not starting with
/// `.` or `-` (so never `..`, a hidden file or an option).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct KernelName(String);

/// Why a kernel name was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NameError {
    /// The name is empty.
    Empty,
    /// The name is longer than 64 bytes.
    TooLong(usize),
    /// The name starts with `.` or `-`.
    BadStart(char),
    /// The name holds a character outside `[A-Za-z0-9_.-]`.
    BadChar(char),
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const ALLOWED: &str = "use 1-64 characters of A-Z a-z 0-9 _ . - (not starting with . or -)";
        match self {
            NameError::Empty => write!(f, "kernel name is empty; {ALLOWED}"),
            NameError::TooLong(n) => write!(f, "kernel name is {n} bytes long; {ALLOWED}"),
            NameError::BadStart(c) => write!(f, "kernel name starts with {c:?}; {ALLOWED}"),
            NameError::BadChar(c) => write!(f, "kernel name contains {c:?}; {ALLOWED}"),
        }
    }
}

impl std::error::Error for NameError {}

impl KernelName {
    /// Validates `name`.
    pub fn new(name: &str) -> Result<KernelName, NameError> {
        let first = name.chars().next().ok_or(NameError::Empty)?;
        if name.len() > 64 {
            return Err(NameError::TooLong(name.len()));
        }
        if first == '.' || first == '-' {
            return Err(NameError::BadStart(first));
        }
        if let Some(bad) = name
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
        {
            return Err(NameError::BadChar(bad));
        }
        Ok(KernelName(name.to_owned()))
    }

    /// The validated name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for KernelName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for KernelName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        KernelName::new(&raw).map_err(serde::de::Error::custom)
    }
}

/// Identifies one submission of a cell, chosen by the client and persisted
/// before the first send, so that a resend is recognised as the same work.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RequestId(pub String);

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A cell's place in its kernel: 1, 2, 3, … per kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CellSeq(pub u64);

impl fmt::Display for CellSeq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Identifies one exec effect; replies are matched to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ExecId(pub u64);

impl fmt::Display for ExecId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "x{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_names_are_refused_with_a_reason() {
        for bad in [
            "",
            "a/b",
            "..",
            ".hidden",
            "-rf",
            "a b",
            "x;rm",
            "$(id)",
            "é",
            &"a".repeat(65),
        ] {
            let err = KernelName::new(bad).unwrap_err();
            assert!(err.to_string().contains("A-Z a-z 0-9"), "{bad:?}: {err}");
        }
        for good in ["default", "k1", "my_kernel.v2", "A-b"] {
            assert_eq!(KernelName::new(good).unwrap().as_str(), good);
        }
    }

    #[test]
    fn deserialising_validates_too() {
        assert!(serde_json::from_str::<KernelName>(r#""../etc""#).is_err());
        assert!(serde_json::from_str::<KernelName>(r#""ok""#).is_ok());
    }
}
