//! Device profiles: which vendor failure modes a simulated device has (docs/design/launch.md).
//!
//! | profile | Path A latch ("first saved SO wins") | custom-scheduler (Path B) cluster |
//! |---|---|---|
//! | [`DeviceProfile::Vendor`] (default) | on: one Path A runtime per process and device | outside AICore's snoop domain: the Path B handshake hang ([`crate::cache`]) |
//! | [`DeviceProfile::Relaxed`] | off | coherent |
//!
//! The vendor profile is the default because software that works on the simulated chip must work
//! on the real stack; the relaxed one is ferry's own device, chosen explicitly. On top of either,
//! [`PathBFixes`] switches on the vendor-side fixes A, B and C of docs/design/launch.md (fix D is the
//! runtime's handshake layout, `ferry_abi::handshake::HandshakeLayout::SPLIT`).
//!
//! # Examples
//! ```
//! use ferry_sim::profile::{DeviceProfile, PathBFixes};
//! use ferry_sim::{Arch, PlatformBuilder};
//! let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(1 << 24).build()?;
//! let caps = p.device(0)?.aicpu_os().caps();
//! assert_eq!(caps.profile, DeviceProfile::Vendor);
//! assert!(caps.first_saved_so_wins && !caps.custom_scheduler_coherent);
//!
//! let p = PlatformBuilder::new(Arch::A2a3)
//!     .hbm_bytes(1 << 24)
//!     .path_b_fixes(PathBFixes { same_cluster_affinity: true, ..PathBFixes::NONE })
//!     .build()?;
//! assert!(p.device(0)?.aicpu_os().caps().custom_scheduler_coherent, "fix C");
//! # Ok::<(), ferry_sim::DeviceError>(())
//! ```

/// Which failure modes of the vendor stack a device has (module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DeviceProfile {
    /// As the vendor stack: the Path A latch on, the Path B cluster not coherent.
    #[default]
    Vendor,
    /// ferry's relaxed device: no latch, a coherent Path B cluster.
    Relaxed,
}

impl DeviceProfile {
    /// Both profiles.
    pub const ALL: [DeviceProfile; 2] = [DeviceProfile::Vendor, DeviceProfile::Relaxed];

    /// `vendor` or `relaxed`.
    pub const fn name(self) -> &'static str {
        match self {
            DeviceProfile::Vendor => "vendor",
            DeviceProfile::Relaxed => "relaxed",
        }
    }

    /// The profile called `name`.
    pub fn from_name(name: &str) -> Option<DeviceProfile> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }

    /// Whether the Path A latch is on.
    pub const fn first_saved_so_wins(self) -> bool {
        matches!(self, DeviceProfile::Vendor)
    }

    /// Whether the custom-scheduler cluster sees AICore writes.
    pub const fn custom_scheduler_coherent(self) -> bool {
        matches!(self, DeviceProfile::Relaxed)
    }
}

impl std::fmt::Display for DeviceProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The vendor-side fixes of docs/design/launch.md for the Path B hang (any combination).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PathBFixes {
    /// Fix A: `SCTLR_EL1.UCI = 1` for the custom scheduler, so EL0 `dc ivac` (and the
    /// invalidate half of `dc civac`) works instead of being trapped and ignored.
    pub el0_cache_maintenance: bool,
    /// Fix B: the custom scheduler's context maps device memory non-cacheable (every access
    /// goes to memory, at a per-access cost).
    pub noncacheable_handshake: bool,
    /// Fix C: the custom scheduler's workers are bound to the cluster in AICore's snoop domain.
    pub same_cluster_affinity: bool,
}

impl PathBFixes {
    /// No fix.
    pub const NONE: PathBFixes = PathBFixes {
        el0_cache_maintenance: false,
        noncacheable_handshake: false,
        same_cluster_affinity: false,
    };

    /// Parses a comma-separated list of `a`, `b`, `c` (empty: none).
    ///
    /// # Errors
    /// The first item that is not one of them.
    pub fn parse(list: &str) -> Result<PathBFixes, String> {
        let mut f = PathBFixes::NONE;
        for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match item.to_ascii_lowercase().as_str() {
                "a" => f.el0_cache_maintenance = true,
                "b" => f.noncacheable_handshake = true,
                "c" => f.same_cluster_affinity = true,
                _ => {
                    return Err(format!(
                        "`{item}` is not a Path B fix (a: EL0 cache maintenance, b: \
                         non-cacheable handshake memory, c: same-cluster affinity)"
                    ))
                }
            }
        }
        Ok(f)
    }

    /// The fixes as letters, e.g. `a,c` (`none` when empty).
    pub fn letters(&self) -> String {
        let v: Vec<&str> = [
            (self.el0_cache_maintenance, "a"),
            (self.noncacheable_handshake, "b"),
            (self.same_cluster_affinity, "c"),
        ]
        .into_iter()
        .filter_map(|(on, l)| on.then_some(l))
        .collect();
        if v.is_empty() {
            "none".into()
        } else {
            v.join(",")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_fix_lists_round_trip() {
        let _bound = ferry_watchdog::bound("the other thread");
        for p in DeviceProfile::ALL {
            assert_eq!(DeviceProfile::from_name(p.name()), Some(p));
        }
        assert_eq!(DeviceProfile::from_name("lenient"), None);
        let f = PathBFixes::parse("a, C").unwrap();
        assert!(f.el0_cache_maintenance && f.same_cluster_affinity && !f.noncacheable_handshake);
        assert_eq!(f.letters(), "a,c");
        assert_eq!(PathBFixes::parse("").unwrap(), PathBFixes::NONE);
        assert_eq!(PathBFixes::NONE.letters(), "none");
        assert!(PathBFixes::parse("d").unwrap_err().contains("`d`"));
    }
}
