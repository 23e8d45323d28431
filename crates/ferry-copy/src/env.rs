//! The copy path's environment knobs, parsed strictly from an injectable source.
//!
//! | variable | default | values |
//! |---|---|---|
//! | [`PREWARM_STREAMS_VAR`] (`UMBP_HBM_GATHER_PREWARM_STREAMS`) | 8 | a decimal integer `0..=`[`MAX_PREWARM_STREAMS`]; `0` turns prewarm (and the cap) off |
//! | [`GATHER_KERNEL_VAR`] (`UMBP_DRAM_GATHER_KERNEL`) | on | `0`/`off`/`false`/`no` disable, `1`/`on`/`true`/`yes` enable (ASCII case-insensitive, surrounding whitespace ignored) |
//!
//! Anything else is an error ([`KnobError`]); [`CopyKnobs::from_source`] logs it with
//! `tracing::warn!`, returns it, and uses the documented default. Tests pass a map instead of
//! mutating the process environment.
//!
//! # Examples
//! ```
//! use ferry_copy::env::{CopyKnobs, GATHER_KERNEL_VAR, PREWARM_STREAMS_VAR};
//! let src = [(PREWARM_STREAMS_VAR, "3"), (GATHER_KERNEL_VAR, "off")];
//! let (k, errors) = CopyKnobs::from_source(&src[..]);
//! assert_eq!((k.prewarm_streams, k.gather_kernel), (3, false));
//! assert!(errors.is_empty());
//! let (k, errors) = CopyKnobs::from_source(&[(PREWARM_STREAMS_VAR, "eight")][..]);
//! assert_eq!(k.prewarm_streams, 8, "garbage falls back to the default");
//! assert_eq!(errors.len(), 1);
//! ```
use std::collections::HashMap;

/// Streams per device that Prewarm creates (docs/design/copy-pool.md).
pub const PREWARM_STREAMS_VAR: &str = "UMBP_HBM_GATHER_PREWARM_STREAMS";
/// Turns the gather kernel off (docs/design/copy-pool.md).
pub const GATHER_KERNEL_VAR: &str = "UMBP_DRAM_GATHER_KERNEL";
/// Default of [`PREWARM_STREAMS_VAR`]: the TP8 peak of concurrent gathers per GPU.
pub const DEFAULT_PREWARM_STREAMS: usize = 8;
/// Largest accepted [`PREWARM_STREAMS_VAR`] (a device has 16 copy engines; more streams than
/// that cannot each hold one).
pub const MAX_PREWARM_STREAMS: usize = 64;

/// Where knob values come from.
pub trait EnvSource {
    /// The raw value of `key`, if set.
    fn var(&self, key: &str) -> Option<String>;
}

/// The process environment.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcessEnv;

impl EnvSource for ProcessEnv {
    fn var(&self, key: &str) -> Option<String> {
        std::env::var_os(key).map(|v| v.to_string_lossy().into_owned())
    }
}

impl EnvSource for HashMap<String, String> {
    fn var(&self, key: &str) -> Option<String> {
        self.get(key).cloned()
    }
}

impl EnvSource for [(&str, &str)] {
    fn var(&self, key: &str) -> Option<String> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| (*v).to_owned())
    }
}

/// A knob value that does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{var}={value:?} is invalid: expected {expected}; using the default {default}")]
pub struct KnobError {
    /// The variable.
    pub var: &'static str,
    /// Its raw value.
    pub value: String,
    /// What would have been accepted.
    pub expected: &'static str,
    /// The value used instead.
    pub default: String,
}

/// Parses [`PREWARM_STREAMS_VAR`]; `Ok(None)` when unset.
///
/// # Errors
/// [`KnobError`] for anything but a decimal integer in `0..=MAX_PREWARM_STREAMS`.
pub fn parse_prewarm_streams(env: &(impl EnvSource + ?Sized)) -> Result<Option<usize>, KnobError> {
    let Some(raw) = env.var(PREWARM_STREAMS_VAR) else { return Ok(None) };
    let t = raw.trim();
    let ok = !t.is_empty() && t.len() <= 4 && t.bytes().all(|b| b.is_ascii_digit());
    match t.parse::<usize>() {
        Ok(n) if ok && n <= MAX_PREWARM_STREAMS => Ok(Some(n)),
        _ => Err(KnobError {
            var: PREWARM_STREAMS_VAR,
            value: raw,
            expected: "a decimal integer from 0 to 64",
            default: DEFAULT_PREWARM_STREAMS.to_string(),
        }),
    }
}

/// Parses [`GATHER_KERNEL_VAR`]; `Ok(None)` when unset.
///
/// # Errors
/// [`KnobError`] for anything but `0/off/false/no/1/on/true/yes`.
pub fn parse_gather_kernel(env: &(impl EnvSource + ?Sized)) -> Result<Option<bool>, KnobError> {
    let Some(raw) = env.var(GATHER_KERNEL_VAR) else { return Ok(None) };
    match raw.trim().to_ascii_lowercase().as_str() {
        "0" | "off" | "false" | "no" => Ok(Some(false)),
        "1" | "on" | "true" | "yes" => Ok(Some(true)),
        _ => Err(KnobError {
            var: GATHER_KERNEL_VAR,
            value: raw,
            expected: "one of 0, off, false, no, 1, on, true, yes",
            default: "on".into(),
        }),
    }
}

/// The copy path's knobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyKnobs {
    /// Streams per device Prewarm creates; 0 = no prewarm, uncapped pool.
    pub prewarm_streams: usize,
    /// Whether the gather kernel may be used.
    pub gather_kernel: bool,
}

impl Default for CopyKnobs {
    fn default() -> Self {
        Self { prewarm_streams: DEFAULT_PREWARM_STREAMS, gather_kernel: true }
    }
}

impl CopyKnobs {
    /// Reads both knobs from `env`. An invalid value is logged (`tracing::warn!`), returned,
    /// and replaced by its default.
    pub fn from_source(env: &(impl EnvSource + ?Sized)) -> (Self, Vec<KnobError>) {
        let mut k = Self::default();
        let mut errors = Vec::new();
        match parse_prewarm_streams(env) {
            Ok(v) => k.prewarm_streams = v.unwrap_or(DEFAULT_PREWARM_STREAMS),
            Err(e) => errors.push(e),
        }
        match parse_gather_kernel(env) {
            Ok(v) => k.gather_kernel = v.unwrap_or(true),
            Err(e) => errors.push(e),
        }
        for e in &errors {
            tracing::warn!("{e}");
        }
        (k, errors)
    }

    /// Reads both knobs from the process environment.
    pub fn from_env() -> Self {
        Self::from_source(&ProcessEnv).0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(var: &'static str, v: &'static str) -> Vec<(&'static str, &'static str)> {
        vec![(var, v)]
    }

    #[test]
    fn prewarm_streams_parses_strictly() {
        for (v, want) in [("0", 0), ("8", 8), (" 3 ", 3), ("64", 64), ("0008", 8)] {
            assert_eq!(
                parse_prewarm_streams(&one(PREWARM_STREAMS_VAR, v)[..]),
                Ok(Some(want)),
                "{v:?}"
            );
        }
        for v in [
            "",
            " ",
            "-1",
            "+3",
            "8x",
            "x8",
            "3.0",
            "1e3",
            "65",
            "99999",
            "18446744073709551616",
            "eight",
            "0x8",
        ] {
            let e = parse_prewarm_streams(&one(PREWARM_STREAMS_VAR, v)[..]).unwrap_err();
            assert_eq!(e.value, v);
            assert!(e.to_string().contains(PREWARM_STREAMS_VAR), "{e}");
        }
        assert_eq!(parse_prewarm_streams(&[][..]), Ok(None));
    }

    #[test]
    fn gather_kernel_parses_strictly() {
        for v in ["0", "off", "OFF", "false", "False", "no", " 0 "] {
            assert_eq!(
                parse_gather_kernel(&one(GATHER_KERNEL_VAR, v)[..]),
                Ok(Some(false)),
                "{v:?}"
            );
        }
        for v in ["1", "on", "true", "yes", "TRUE"] {
            assert_eq!(
                parse_gather_kernel(&one(GATHER_KERNEL_VAR, v)[..]),
                Ok(Some(true)),
                "{v:?}"
            );
        }
        for v in ["", "2", "disable", "0ff", "nope"] {
            assert!(parse_gather_kernel(&one(GATHER_KERNEL_VAR, v)[..]).is_err(), "{v:?}");
        }
    }

    #[test]
    fn the_streams_knob_is_n_unset_is_the_default_and_zero_is_zero() {
        for (v, want) in [("3", 3), ("64", 64), ("0", 0), (" 0 ", 0)] {
            let (k, errors) = CopyKnobs::from_source(&one(PREWARM_STREAMS_VAR, v)[..]);
            assert_eq!((k.prewarm_streams, errors.len()), (want, 0), "{v:?}");
        }
        let (k, errors) = CopyKnobs::from_source(&[][..]);
        assert_eq!((k.prewarm_streams, k.gather_kernel, errors.len()), (8, true, 0), "unset");
        assert_eq!(DEFAULT_PREWARM_STREAMS, 8);
    }

    #[test]
    fn the_kernel_knob_turns_the_engines_gather_kernel_off() {
        use crate::HbmConfig;
        for (v, on) in [("0", false), ("off", false), ("OFF", false), ("1", true), ("on", true)] {
            let (k, errors) = CopyKnobs::from_source(&one(GATHER_KERNEL_VAR, v)[..]);
            assert!(errors.is_empty(), "{v:?}");
            assert_eq!(HbmConfig::from_knobs(&k).gather_kernel, on, "{v:?}");
        }
        let (k, _) = CopyKnobs::from_source(&[][..]);
        assert!(HbmConfig::from_knobs(&k).gather_kernel, "unset: on");
        let k = CopyKnobs { prewarm_streams: 3, gather_kernel: false };
        assert_eq!(
            HbmConfig::from_knobs(&k),
            HbmConfig { gather_kernel: false, ..HbmConfig::default() },
            "the kernel knob is the only one the engine's configuration takes"
        );
    }

    #[test]
    fn garbage_falls_back_to_defaults_and_is_reported() {
        let src = [(PREWARM_STREAMS_VAR, "lots"), (GATHER_KERNEL_VAR, "maybe")];
        let (k, errors) = CopyKnobs::from_source(&src[..]);
        assert_eq!(k, CopyKnobs::default());
        assert_eq!(errors.len(), 2);
        assert_eq!(errors[0].var, PREWARM_STREAMS_VAR);
        assert_eq!(errors[1].var, GATHER_KERNEL_VAR);
        let (k, errors) = CopyKnobs::from_source(&[(PREWARM_STREAMS_VAR, "0")][..]);
        assert_eq!((k.prewarm_streams, k.gather_kernel, errors.len()), (0, true, 0));
        let m: HashMap<String, String> =
            [(GATHER_KERNEL_VAR.to_owned(), "false".to_owned())].into();
        assert!(!CopyKnobs::from_source(&m).0.gather_kernel);
    }
}
