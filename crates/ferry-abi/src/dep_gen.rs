//! DepGen device records: one variable-length *chain* of 8-byte words per `submit_task`.
//!
//! The original runtime writes a fixed 4,672-byte record per submit (32 tensor slots of 128
//! bytes, 64 inline dependencies). A chain holds only what the submit has: a 5-word header, the
//! tensors' roles and dtypes (one byte each, eight per word), two words per tensor and one word
//! per dependency — a one-tensor submit without dependencies is 8 words (64 B). The DepGen lane's
//! transport record is one word (`u64`); a chain is written with one contiguous write that never
//! straddles two buffers, so every buffer holds whole chains and a dropped buffer loses whole
//! chains only. A submit larger than one buffer continues in overflow chains (flag
//! [`DEP_GEN_FLAG_OVERFLOW`], the last one also [`DEP_GEN_FLAG_LAST_OVERFLOW`]), as the
//! original's overflow records do.
//!
//! # Layout (little-endian `u64` words)
//!
//! | word | bits 0..32 | bits 32..64 |
//! |---|---|---|
//! | 0 | `task_id` (all 64 bits) | |
//! | 1 | `flags` (`DEP_GEN_FLAG_*`) | `chain_tensors` u16, then `chain_deps` u16 |
//! | 2 | `total_tensors` u32 | `total_deps` u32 |
//! | 3 | `kernel_id[0]` i32 (AIC) | `kernel_id[1]` i32 (AIV0) |
//! | 4 | `kernel_id[2]` i32 (AIV1) | `block_num` u32 |
//! | 5.. | byte `i` of word `5 + i / 8` is tensor `i`'s role (`ARG_ROLE_*`, low 4 bits) and `DType` code (high 4 bits) | |
//! | then | per tensor: `addr` u64, `bytes` u64 | |
//! | then | per dependency: the predecessor's task id | |
//!
//! A chain is `5 + ceil(t / 8) + 2·t + d` words for `t = chain_tensors`, `d = chain_deps`. The
//! head chain carries the first tensors, then the first dependencies; each overflow chain
//! continues where the previous one stopped, tensors before dependencies. `total_*` are the
//! submit's totals, repeated in every chain.
//!
//! # Examples
//! ```
//! use ferry_abi::dep_gen::{self, DepGenHead, DepGenTensor};
//! use ferry_abi::records::{DType, ARG_ROLE_OUTPUT};
//! let head = DepGenHead { task_id: 7, flags: 0, kernel_id: [-1, 4, -1], block_num: 2 };
//! let t = [DepGenTensor { role: ARG_ROLE_OUTPUT, dtype: DType::BFloat16, addr: 0x1000, bytes: 64 }];
//! let mut scratch = [0u64; 64];
//! let mut out = Vec::new();
//! let chains = dep_gen::encode(&head, t.iter().copied(), &[3, 5], &mut scratch, |c| {
//!     out.extend_from_slice(c)
//! })
//! .unwrap();
//! assert_eq!((chains, out.len()), (1, 5 + 1 + 2 + 2)); // 80 bytes, not 4,672
//! let (chain, len) = dep_gen::parse_chain(&out).unwrap();
//! assert_eq!((chain.task_id, len, chain.deps()), (7, out.len(), &[3u64, 5][..]));
//! assert_eq!(chain.tensor(0), Some(t[0]));
//! ```

use core::fmt;

use crate::records::{DType, ARG_ROLE_INOUT, ARG_ROLE_INPUT, ARG_ROLE_OUTPUT};

/// Words of a chain header.
pub const DEP_GEN_HEADER_WORDS: usize = 5;
/// Fewest words a chain buffer must hold: a header, one role word and one tensor.
pub const DEP_GEN_MIN_CHAIN_WORDS: usize = DEP_GEN_HEADER_WORDS + 1 + 2;
/// Words of one DepGen buffer in the default sizing (64 KiB).
pub const DEP_GEN_WORDS_PER_BUFFER: usize = 8192;
/// `flags`: the submit was inside a manual scope.
pub const DEP_GEN_FLAG_IN_MANUAL_SCOPE: u32 = 1;
/// `flags` of a head chain: overflow chains follow.
pub const DEP_GEN_FLAG_HAS_OVERFLOW: u32 = 2;
/// `flags`: this chain continues the preceding chain's submit.
pub const DEP_GEN_FLAG_OVERFLOW: u32 = 4;
/// `flags`: this overflow chain is the submit's last.
pub const DEP_GEN_FLAG_LAST_OVERFLOW: u32 = 8;
/// `flags`: the task was early-dispatched.
pub const DEP_GEN_FLAG_EARLY_DISPATCH: u32 = 16;
const KNOWN_FLAGS: u32 = 31;
/// Chain flags the encoder sets itself (callers' own flags must not contain them).
const CHAIN_FLAGS: u32 =
    DEP_GEN_FLAG_HAS_OVERFLOW | DEP_GEN_FLAG_OVERFLOW | DEP_GEN_FLAG_LAST_OVERFLOW;

/// What every chain of one submit repeats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DepGenHead {
    /// Task id.
    pub task_id: u64,
    /// `DEP_GEN_FLAG_IN_MANUAL_SCOPE` / `DEP_GEN_FLAG_EARLY_DISPATCH` (the chain flags are set by
    /// the encoder).
    pub flags: u32,
    /// Kernel per sub-core (AIC, AIV0, AIV1); −1 when inactive.
    pub kernel_id: [i32; 3],
    /// SPMD block count.
    pub block_num: u32,
}

/// One tensor argument of a submit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DepGenTensor {
    /// `ARG_ROLE_INPUT`, `ARG_ROLE_OUTPUT` or `ARG_ROLE_INOUT`.
    pub role: u8,
    /// Element type of the view (what `deps.json` names and divides `bytes` by).
    pub dtype: DType,
    /// Device address of the view.
    pub addr: u64,
    /// Bytes of the view.
    pub bytes: u64,
}

/// Why a submit could not be encoded or words are not a chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DepGenError {
    /// The scratch buffer holds fewer than [`DEP_GEN_MIN_CHAIN_WORDS`] words.
    ScratchTooSmall {
        /// Words given.
        words: usize,
    },
    /// The submit has more tensors or dependencies than the format counts (`u32`).
    TooLarge,
    /// The words end inside a chain.
    Truncated {
        /// Words the chain needs.
        need: usize,
        /// Words left.
        have: usize,
    },
    /// A header field holds a value outside its range.
    BadField {
        /// Field name.
        field: &'static str,
        /// The raw value.
        value: u64,
    },
}

impl fmt::Display for DepGenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ScratchTooSmall { words } => {
                write!(f, "a DepGen chain needs {DEP_GEN_MIN_CHAIN_WORDS} words, got {words}")
            }
            Self::TooLarge => f.write_str("DepGen submit has more tensors or deps than u32 counts"),
            Self::Truncated { need, have } => {
                write!(f, "DepGen chain of {need} words, {have} left")
            }
            Self::BadField { field, value } => {
                write!(f, "DepGen chain field {field} has invalid value {value}")
            }
        }
    }
}

impl core::error::Error for DepGenError {}

/// Words of a chain with `tensors` tensors and `deps` dependencies.
pub const fn chain_words(tensors: usize, deps: usize) -> usize {
    DEP_GEN_HEADER_WORDS + tensors.div_ceil(8) + 2 * tensors + deps
}

/// Most tensors one chain of at most `cap` words holds (with no dependencies).
const fn tensors_fitting(cap: usize, left: usize) -> usize {
    // chain_words(t, 0) is increasing in t; start from the upper bound and step down.
    let room = cap.saturating_sub(DEP_GEN_HEADER_WORDS);
    let mut t = if room / 2 < left { room / 2 } else { left };
    while t > 0 && chain_words(t, 0) > cap {
        t -= 1;
    }
    t
}

/// Encodes one submit into chains of at most `scratch.len()` words, calling `emit` with each
/// chain in order; returns the number of chains. Allocates nothing: each chain is built in
/// `scratch`.
///
/// # Errors
/// [`DepGenError::ScratchTooSmall`] when `scratch` holds fewer than
/// [`DEP_GEN_MIN_CHAIN_WORDS`] words, [`DepGenError::TooLarge`] beyond `u32` counts.
pub fn encode(
    head: &DepGenHead,
    mut tensors: impl ExactSizeIterator<Item = DepGenTensor>,
    deps: &[u64],
    scratch: &mut [u64],
    mut emit: impl FnMut(&[u64]),
) -> Result<usize, DepGenError> {
    let cap = scratch.len();
    if cap < DEP_GEN_MIN_CHAIN_WORDS {
        return Err(DepGenError::ScratchTooSmall { words: cap });
    }
    let (nt, nd) = (tensors.len(), deps.len());
    let (Ok(total_t), Ok(total_d)) = (u32::try_from(nt), u32::try_from(nd)) else {
        return Err(DepGenError::TooLarge);
    };
    let (mut t_done, mut d_done, mut chains) = (0usize, 0usize, 0usize);
    loop {
        // Counts are u16 per chain (the totals are u32).
        let t = tensors_fitting(cap, nt - t_done).min(u16::MAX as usize);
        let d = (cap - chain_words(t, 0)).min(nd - d_done).min(u16::MAX as usize);
        let last = t_done + t == nt && d_done + d == nd;
        let mut flags = head.flags & !CHAIN_FLAGS;
        if chains == 0 {
            if !last {
                flags |= DEP_GEN_FLAG_HAS_OVERFLOW;
            }
        } else {
            flags |= DEP_GEN_FLAG_OVERFLOW | if last { DEP_GEN_FLAG_LAST_OVERFLOW } else { 0 };
        }
        let len = chain_words(t, d);
        let c = &mut scratch[..len];
        c[0] = head.task_id;
        c[1] = u64::from(flags) | (t as u64) << 32 | (d as u64) << 48;
        c[2] = u64::from(total_t) | u64::from(total_d) << 32;
        c[3] = u64::from(head.kernel_id[0] as u32) | u64::from(head.kernel_id[1] as u32) << 32;
        c[4] = u64::from(head.kernel_id[2] as u32) | u64::from(head.block_num) << 32;
        let roles = DEP_GEN_HEADER_WORDS;
        let data = roles + t.div_ceil(8);
        c[roles..data].fill(0);
        for k in 0..t {
            // `tensors.len()` promised `nt` items; a short iterator ends the submit early as
            // zero tensors, which the decoder sees as address 0.
            let x = tensors.next().unwrap_or(DepGenTensor {
                role: ARG_ROLE_INPUT,
                dtype: DType::Float32,
                addr: 0,
                bytes: 0,
            });
            c[roles + k / 8] |= u64::from(role_byte(x.role, x.dtype)) << (8 * (k % 8));
            c[data + 2 * k] = x.addr;
            c[data + 2 * k + 1] = x.bytes;
        }
        let dep_at = data + 2 * t;
        c[dep_at..].copy_from_slice(&deps[d_done..d_done + d]);
        emit(c);
        chains += 1;
        t_done += t;
        d_done += d;
        if last {
            return Ok(chains);
        }
    }
}

/// One chain as the host reads it (borrowing the buffer's words).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DepGenChain<'a> {
    /// Task id.
    pub task_id: u64,
    /// `DEP_GEN_FLAG_*` bits.
    pub flags: u32,
    /// The submit's tensors in all its chains.
    pub total_tensors: u32,
    /// The submit's dependencies in all its chains.
    pub total_deps: u32,
    /// Kernel per sub-core (AIC, AIV0, AIV1); −1 when inactive.
    pub kernel_id: [i32; 3],
    /// SPMD block count.
    pub block_num: u32,
    roles: &'a [u64],
    tensors: &'a [u64],
    deps: &'a [u64],
}

impl<'a> DepGenChain<'a> {
    /// Tensors in this chain.
    pub fn tensor_count(&self) -> usize {
        self.tensors.len() / 2
    }

    /// Tensor `i` of this chain.
    pub fn tensor(&self, i: usize) -> Option<DepGenTensor> {
        if i >= self.tensor_count() {
            return None;
        }
        Some(tensor_at(self.roles, self.tensors, i))
    }

    /// This chain's tensors.
    pub fn tensors(&self) -> impl ExactSizeIterator<Item = DepGenTensor> + 'a {
        let (roles, t) = (self.roles, self.tensors);
        (0..t.len() / 2).map(move |i| tensor_at(roles, t, i))
    }

    /// This chain's dependencies (predecessor task ids).
    pub fn deps(&self) -> &'a [u64] {
        self.deps
    }

    /// Whether this chain continues an earlier chain's submit.
    pub fn is_overflow(&self) -> bool {
        self.flags & DEP_GEN_FLAG_OVERFLOW != 0
    }
}

/// The byte of a tensor with role `role` and element type `dtype`: the role in the low 4 bits,
/// the dtype's code in the high 4.
const fn role_byte(role: u8, dtype: DType) -> u8 {
    (role & 0xf) | (dtype as u8) << 4
}

/// Tensor `i` of a chain whose role words are `roles` and tensor words `tensors` (the bytes
/// were checked by [`parse_chain`]).
fn tensor_at(roles: &[u64], tensors: &[u64], i: usize) -> DepGenTensor {
    let b = (roles[i / 8] >> (8 * (i % 8))) as u8;
    DepGenTensor {
        role: b & 0xf,
        dtype: DType::from_u8(b >> 4).unwrap_or(DType::Float32),
        addr: tensors[2 * i],
        bytes: tensors[2 * i + 1],
    }
}

/// Parses the chain at the start of `words`; returns it and its length in words. Never panics
/// and never trusts a count: every field is checked against the words that are there.
///
/// # Errors
/// [`DepGenError::Truncated`] when the words end inside the chain, [`DepGenError::BadField`]
/// for unknown flags, roles, dtypes, kernel ids or inconsistent counts.
pub fn parse_chain(words: &[u64]) -> Result<(DepGenChain<'_>, usize), DepGenError> {
    let bad = |field, value| Err(DepGenError::BadField { field, value });
    if words.len() < DEP_GEN_HEADER_WORDS {
        return Err(DepGenError::Truncated { need: DEP_GEN_HEADER_WORDS, have: words.len() });
    }
    let flags = words[1] as u32;
    let t = (words[1] >> 32) as u16 as usize;
    let d = (words[1] >> 48) as usize;
    let (total_t, total_d) = (words[2] as u32, (words[2] >> 32) as u32);
    let kernel_id =
        [words[3] as u32 as i32, (words[3] >> 32) as u32 as i32, words[4] as u32 as i32];
    if flags & !KNOWN_FLAGS != 0 {
        return bad("flags", flags.into());
    }
    if t as u64 > u64::from(total_t) || d as u64 > u64::from(total_d) {
        return bad("chain counts", words[1]);
    }
    if let Some(&k) = kernel_id.iter().find(|&&k| k < -1) {
        return bad("kernel_id", k as u32 as u64);
    }
    let len = chain_words(t, d);
    if words.len() < len {
        return Err(DepGenError::Truncated { need: len, have: words.len() });
    }
    let roles = &words[DEP_GEN_HEADER_WORDS..DEP_GEN_HEADER_WORDS + t.div_ceil(8)];
    for i in 0..t {
        let b = (roles[i / 8] >> (8 * (i % 8))) as u8;
        if !matches!(b & 0xf, ARG_ROLE_INPUT | ARG_ROLE_OUTPUT | ARG_ROLE_INOUT) {
            return bad("role", (b & 0xf).into());
        }
        if DType::from_u8(b >> 4).is_none() {
            return bad("dtype", (b >> 4).into());
        }
    }
    let data = DEP_GEN_HEADER_WORDS + t.div_ceil(8);
    let chain = DepGenChain {
        task_id: words[0],
        flags,
        total_tensors: total_t,
        total_deps: total_d,
        kernel_id,
        block_num: (words[4] >> 32) as u32,
        roles,
        tensors: &words[data..data + 2 * t],
        deps: &words[data + 2 * t..len],
    };
    Ok((chain, len))
}

/// The chains of one buffer's words, in order; ends at the first error.
pub fn chains(words: &[u64]) -> impl Iterator<Item = Result<DepGenChain<'_>, DepGenError>> {
    crate::frames(words, parse_chain)
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use super::*;

    fn head() -> DepGenHead {
        DepGenHead {
            task_id: 42,
            flags: DEP_GEN_FLAG_IN_MANUAL_SCOPE,
            kernel_id: [3, -1, -1],
            block_num: 4,
        }
    }

    fn tensors(n: usize) -> Vec<DepGenTensor> {
        (0..n)
            .map(|i| DepGenTensor {
                role: [ARG_ROLE_INPUT, ARG_ROLE_OUTPUT, ARG_ROLE_INOUT][i % 3],
                dtype: DType::ALL[i % DType::ALL.len()],
                addr: 0x1000 + 64 * i as u64,
                bytes: 4 * (i as u64 + 1),
            })
            .collect()
    }

    /// Encodes, parses every chain back and reassembles the submit.
    fn round_trip(nt: usize, nd: usize, cap: usize) -> (Vec<DepGenTensor>, Vec<u64>, usize, usize) {
        let ts = tensors(nt);
        let ds: Vec<u64> = (0..nd as u64).map(|i| 1000 + i).collect();
        let mut scratch = std::vec![0u64; cap];
        let mut words = Vec::new();
        let mut lens = Vec::new();
        let n = encode(&head(), ts.iter().copied(), &ds, &mut scratch, |c| {
            assert!(c.len() <= cap);
            lens.push(c.len());
            words.extend_from_slice(c);
        })
        .unwrap();
        assert_eq!(n, lens.len());
        let (mut got_t, mut got_d) = (Vec::new(), Vec::new());
        let parsed: Vec<DepGenChain<'_>> = chains(&words).map(Result::unwrap).collect();
        assert_eq!(parsed.len(), n);
        for (k, c) in parsed.iter().enumerate() {
            assert_eq!((c.task_id, c.block_num, c.kernel_id), (42, 4, [3, -1, -1]));
            assert_eq!((c.total_tensors as usize, c.total_deps as usize), (nt, nd));
            assert_ne!(c.flags & DEP_GEN_FLAG_IN_MANUAL_SCOPE, 0);
            assert_eq!(c.is_overflow(), k > 0);
            assert_eq!(c.flags & DEP_GEN_FLAG_HAS_OVERFLOW != 0, k == 0 && n > 1);
            assert_eq!(c.flags & DEP_GEN_FLAG_LAST_OVERFLOW != 0, k > 0 && k + 1 == n);
            got_t.extend(c.tensors());
            got_d.extend_from_slice(c.deps());
        }
        (got_t, got_d, n, words.len())
    }

    #[test]
    fn submits_of_every_size_round_trip() {
        for n in [0, 1, 31, 32, 33, 200] {
            for (nt, nd) in [(n, 0), (0, n), (n, n), (1, n), (n, 1)] {
                for cap in [DEP_GEN_MIN_CHAIN_WORDS, 64, DEP_GEN_WORDS_PER_BUFFER] {
                    let (t, d, chains, words) = round_trip(nt, nd, cap);
                    assert_eq!(t, tensors(nt), "{nt} tensors, {nd} deps, cap {cap}");
                    assert_eq!(d, (0..nd as u64).map(|i| 1000 + i).collect::<Vec<_>>());
                    if cap == DEP_GEN_WORDS_PER_BUFFER {
                        assert_eq!(
                            (chains, words),
                            (1, chain_words(nt, nd)),
                            "one chain when it fits"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_storm_submit_is_tens_of_bytes() {
        assert_eq!(chain_words(1, 0) * 8, 64);
        assert_eq!(chain_words(1, 1) * 8, 72);
    }

    #[test]
    fn truncated_and_corrupt_chains_are_typed_errors() {
        let mut scratch = [0u64; 64];
        let mut w = Vec::new();
        encode(&head(), tensors(3).into_iter(), &[1, 2], &mut scratch, |c| w.extend_from_slice(c))
            .unwrap();
        for cut in 0..w.len() {
            assert!(matches!(parse_chain(&w[..cut]), Err(DepGenError::Truncated { .. })), "{cut}");
        }
        let mut bad_flags = w.clone();
        bad_flags[1] |= 1 << 10;
        assert!(matches!(
            parse_chain(&bad_flags),
            Err(DepGenError::BadField { field: "flags", .. })
        ));
        let mut bad_role = w.clone();
        bad_role[DEP_GEN_HEADER_WORDS] |= 9;
        assert!(matches!(parse_chain(&bad_role), Err(DepGenError::BadField { field: "role", .. })));
        let mut bad_dtype = w.clone();
        bad_dtype[DEP_GEN_HEADER_WORDS] |= 0xf0; // no dtype has code 15
        assert!(matches!(
            parse_chain(&bad_dtype),
            Err(DepGenError::BadField { field: "dtype", value: 15 })
        ));
        let mut bad_count = w.clone();
        bad_count[2] = 0; // totals below the chain's own counts
        assert!(parse_chain(&bad_count).is_err());
        // Garbage never panics.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..2000 {
            let g: Vec<u64> = (0..12)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x
                })
                .collect();
            let _ = chains(&g).count();
        }
        assert!(matches!(
            encode(&head(), tensors(1).into_iter(), &[], &mut [0u64; 7], |_| {}),
            Err(DepGenError::ScratchTooSmall { words: 7 })
        ));
    }
}
