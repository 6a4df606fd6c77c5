//! Numbers of the pipeline file that must lie in a range, checked as they
//! are read: a field declared `Bounded<u64, 1, 600_000>` cannot hold 0, so
//! no `validate` step can forget it, and the refusal names file, line and
//! field as every parse error does (the reader locates it; see
//! `config::LoadedConfig::parse`).
//!
//! Ranges that depend on other fields (`workers` within `max_parallelism`,
//! a plugin's memory within what the runtime can give) stay in `validate`.

use serde::{Deserialize, Deserializer};

/// The largest duration a pipeline file may give, ms (100 years): larger
/// values are typos that would overflow time arithmetic later.
pub const MAX_DURATION_MS: u64 = 100 * 365 * 24 * 3600 * 1000;

/// A number of type `T` in `MIN..=MAX` (`MAX = i128::MAX`: no upper bound).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bounded<T, const MIN: i128, const MAX: i128>(T);

impl<T: Copy + TryInto<i128>, const MIN: i128, const MAX: i128> Bounded<T, MIN, MAX> {
    /// `value` if it is in range, else the message a pipeline file gets.
    pub fn new(value: T) -> Result<Self, String> {
        let wide: i128 = value.try_into().unwrap_or(i128::MAX);
        if (MIN..=MAX).contains(&wide) {
            Ok(Bounded(value))
        } else if MAX == i128::MAX {
            Err(format!("must be at least {MIN} (found {wide})"))
        } else {
            Err(format!("must be between {MIN} and {MAX} (found {wide})"))
        }
    }

    /// A default the code knows is in range (checked when first used, so
    /// that a wrong constant fails every test rather than a user).
    pub(crate) fn known(value: T) -> Self {
        match Self::new(value) {
            Ok(bounded) => bounded,
            Err(message) => panic!("a built-in default is out of its range: {message}"),
        }
    }

    /// The number.
    pub fn get(self) -> T {
        self.0
    }
}

/// Zero, for ranges that hold it (`#[serde(default)]` fields).
impl<T: Copy + Default + TryInto<i128>, const MIN: i128, const MAX: i128> Default
    for Bounded<T, MIN, MAX>
{
    fn default() -> Self {
        Self::known(T::default())
    }
}

impl<'de, T, const MIN: i128, const MAX: i128> Deserialize<'de> for Bounded<T, MIN, MAX>
where
    T: Copy + TryInto<i128> + Deserialize<'de>,
{
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = T::deserialize(deserializer)?;
        Self::new(value).map_err(serde::de::Error::custom)
    }
}

const DURATION: i128 = MAX_DURATION_MS as i128;

/// A duration in ms, 0 allowed.
pub type DurationMs = Bounded<u64, 0, DURATION>;

/// A duration in ms of at least 1.
pub type PositiveDurationMs = Bounded<u64, 1, DURATION>;

/// A signed offset in ms (a join's bounds).
pub type OffsetMs = Bounded<i64, { -DURATION }, DURATION>;

/// A count of at least 1, with no upper bound.
pub type AtLeastOne = Bounded<u64, 1, { i128::MAX }>;

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct Section {
        #[allow(dead_code)]
        deadline_ms: Bounded<u64, 1, 600_000>,
        #[allow(dead_code)]
        threshold: Option<AtLeastOne>,
    }

    #[test]
    fn numbers_out_of_range_are_refused_with_the_range() {
        let ok: Section = toml::from_str("deadline_ms = 600000\nthreshold = 1").unwrap();
        assert_eq!(ok.deadline_ms.get(), 600_000);
        let error = toml::from_str::<Section>("deadline_ms = 0").unwrap_err();
        assert!(
            error
                .message()
                .contains("must be between 1 and 600000 (found 0)"),
            "{error}"
        );
        let error = toml::from_str::<Section>("deadline_ms = 5\nthreshold = 0").unwrap_err();
        assert!(
            error.message().contains("must be at least 1 (found 0)"),
            "{error}"
        );
        assert!(toml::from_str::<Section>("deadline_ms = -1").is_err());
    }

    #[test]
    fn signed_offsets_take_both_sides() {
        assert_eq!(OffsetMs::new(-5).unwrap().get(), -5);
        assert!(OffsetMs::new(i64::MIN).is_err());
    }
}
