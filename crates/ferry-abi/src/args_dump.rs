//! ArgsDump device records: one variable-length *chain* of 8-byte words per task and stage.
//!
//! The original runtime writes one fixed 128-byte [`ArgsDumpRecord`] per argument (two cache
//! lines, mostly room for five dimensions and padding). A chain holds what the arguments have:
//! a 3-word header shared by the task's arguments of one stage, then per argument one word of
//! small fields and either the scalar's value or the tensor's payload offset, payload size and
//! one word per dimension. A one-dimensional tensor takes 4 words and a scalar 2, so the storm's
//! three arguments per task (input and scalar before dispatch, output after completion) take two
//! chains of 16 words (128 B) instead of three records (384 B). The ArgsDump lane's transport
//! record is one word (`u64`); a chain is written with one contiguous write that never straddles
//! two buffers, so every buffer holds whole chains and a dropped buffer loses whole chains only.
//! The host expands every argument back into the [`ArgsDumpRecord`] the device described, so
//! `args_dump.json` keeps its layout.
//!
//! # Layout (little-endian `u64` words)
//!
//! | word | bits |
//! |---|---|
//! | 0 | `task_id` |
//! | 1 | `stage` u8 @0, argument count u8 @8, `func_count` u8 @16, reserved @24, `func_ids[0]` u16 @32, `func_ids[1]` u16 @48 |
//! | 2 | `func_ids[2]` u16 @0, reserved @16 |
//! | per argument | `kind` u8 @0, `role` u8 @8, `dtype` u8 @16, `flags` u8 @24, `ndims` u4 @32, chain flags u4 @36 (truncated, contiguous, has start offset), reserved @40, `arg_index` u16 @48 |
//! | scalar | `scalar_value` |
//! | tensor | `payload_offset`, `payload_size`, then per dimension `shapes[i]` u32 @0 and `strides[i]` u32 @32, then `start_offset` when its chain flag is set |
//!
//! Padding fields are not carried (they decode as zero).
//!
//! # Examples
//! ```
//! use ferry_abi::args_dump::{self, ArgsChainHead};
//! use ferry_abi::records::{ArgsDumpRecord, ARG_KIND_SCALAR, ARG_ROLE_INPUT, ARG_ROLE_SCALAR};
//! let tensor = ArgsDumpRecord {
//!     task_id: 7, role: ARG_ROLE_INPUT, ndims: 1, is_contiguous: 1, payload_size: 64,
//!     func_ids: [3, 0, 0], func_count: 1, shapes: [16, 0, 0, 0, 0], strides: [1, 0, 0, 0, 0],
//!     ..Default::default()
//! };
//! let scalar = ArgsDumpRecord {
//!     kind: ARG_KIND_SCALAR, role: ARG_ROLE_SCALAR, arg_index: 1, scalar_value: 42,
//!     ndims: 0, shapes: [0; 5], strides: [0; 5], payload_size: 0, ..tensor
//! };
//! let mut out = [0u64; 32];
//! let mut len = args_dump::start(&mut out, &ArgsChainHead::of(&tensor)).unwrap();
//! len = args_dump::push(&mut out, len, &tensor).unwrap();
//! len = args_dump::push(&mut out, len, &scalar).unwrap();
//! assert_eq!(len, 3 + 4 + 2); // 72 bytes, not 256
//! let (chain, used) = args_dump::parse_chain(&out[..len]).unwrap();
//! assert_eq!(used, len);
//! assert_eq!(chain.records().collect::<Vec<_>>(), [tensor, scalar]);
//! ```

use core::fmt;

use crate::records::{ArgsDumpRecord, ARGS_MAX_DIMS, ARG_KIND_SCALAR, ARG_KIND_TENSOR};

/// Words of a chain header.
pub const ARGS_CHAIN_HEADER_WORDS: usize = 3;
/// Most arguments one chain holds (the count is a byte); a stage with more continues in a second
/// chain with the same header.
pub const ARGS_CHAIN_MAX_ARGS: usize = 255;
/// Most words one argument takes: a tensor of [`ARGS_MAX_DIMS`] dimensions with a start offset.
pub const ARGS_ARG_MAX_WORDS: usize = 4 + ARGS_MAX_DIMS;
/// Words of one ArgsDump buffer in the default sizing (64 KiB).
pub const ARGS_WORDS_PER_BUFFER: usize = 8192;

/// Chain flag: the payload was truncated.
const CF_TRUNCATED: u64 = 1;
/// Chain flag: the view is contiguous.
const CF_CONTIGUOUS: u64 = 2;
/// Chain flag: a `start_offset` word follows the dimensions.
const CF_START_OFFSET: u64 = 4;

/// What every argument of one chain shares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArgsChainHead {
    /// Task id.
    pub task_id: u64,
    /// `ARG_STAGE_*`.
    pub stage: u8,
    /// Entries used in `func_ids`.
    pub func_count: u8,
    /// Kernel function ids of the task.
    pub func_ids: [u16; 3],
}

impl ArgsChainHead {
    /// The header fields of `r`.
    pub fn of(r: &ArgsDumpRecord) -> Self {
        ArgsChainHead {
            task_id: r.task_id,
            stage: r.stage,
            func_count: r.func_count,
            func_ids: r.func_ids,
        }
    }
}

/// Why an argument could not be encoded or words are not a chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgsChainError {
    /// The output has no room for the header or the next argument.
    Full {
        /// Words the chain would need.
        need: usize,
        /// Words the output holds.
        have: usize,
    },
    /// The chain already holds [`ARGS_CHAIN_MAX_ARGS`] arguments.
    TooManyArgs,
    /// The argument belongs to another task, stage or kernel than the chain's header.
    HeadMismatch,
    /// The words end inside a chain.
    Truncated {
        /// Words the chain needs.
        need: usize,
        /// Words left.
        have: usize,
    },
    /// A field holds a value the format cannot carry or the chain cannot hold.
    BadField {
        /// Field name.
        field: &'static str,
        /// The raw value.
        value: u64,
    },
}

impl fmt::Display for ArgsChainError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Full { need, have } => {
                write!(f, "an ArgsDump chain of {need} words does not fit {have}")
            }
            Self::TooManyArgs => {
                write!(f, "an ArgsDump chain holds at most {ARGS_CHAIN_MAX_ARGS} arguments")
            }
            Self::HeadMismatch => {
                f.write_str("argument of another task, stage or kernel than its ArgsDump chain")
            }
            Self::Truncated { need, have } => {
                write!(f, "ArgsDump chain of {need} words, {have} left")
            }
            Self::BadField { field, value } => {
                write!(f, "ArgsDump chain field {field} has invalid value {value}")
            }
        }
    }
}

impl core::error::Error for ArgsChainError {}

/// Words argument `r` takes in a chain.
pub const fn arg_words(r: &ArgsDumpRecord) -> usize {
    if r.kind == ARG_KIND_SCALAR {
        2
    } else {
        3 + r.ndims as usize + if r.start_offset != 0 { 1 } else { 0 }
    }
}

/// Writes the header of an empty chain for `head` into `out`; returns the chain's length.
///
/// # Errors
/// [`ArgsChainError::Full`] when `out` holds fewer than [`ARGS_CHAIN_HEADER_WORDS`] words,
/// [`ArgsChainError::BadField`] for a `func_count` above 3.
pub fn start(out: &mut [u64], head: &ArgsChainHead) -> Result<usize, ArgsChainError> {
    if out.len() < ARGS_CHAIN_HEADER_WORDS {
        return Err(ArgsChainError::Full { need: ARGS_CHAIN_HEADER_WORDS, have: out.len() });
    }
    if head.func_count > 3 {
        return Err(ArgsChainError::BadField {
            field: "func_count",
            value: head.func_count.into(),
        });
    }
    [out[0], out[1], out[2]] = head_words(head);
    Ok(ARGS_CHAIN_HEADER_WORDS)
}

/// The header words of a chain of `head` with no arguments counted.
fn head_words(head: &ArgsChainHead) -> [u64; ARGS_CHAIN_HEADER_WORDS] {
    [
        head.task_id,
        u64::from(head.stage)
            | u64::from(head.func_count) << 16
            | u64::from(head.func_ids[0]) << 32
            | u64::from(head.func_ids[1]) << 48,
        u64::from(head.func_ids[2]),
    ]
}

/// Bits of header word 1 holding the argument count.
const COUNT_BITS: u64 = 0xFF << 8;

/// One argument as a chain carries it, with every field typed to fit its place in the words:
/// what a device writer builds from its task directly (no 128-byte [`ArgsDumpRecord`] first),
/// and what [`push`] takes out of a record after checking it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainArg<'a> {
    /// `ARG_ROLE_*`.
    pub role: u8,
    /// `DType` code.
    pub dtype: u8,
    /// Argument flags (bit 0: index ambiguous).
    pub flags: u8,
    /// Position in the kernel's signature.
    pub arg_index: u16,
    /// The payload was truncated.
    pub truncated: bool,
    /// The view is contiguous.
    pub contiguous: bool,
    /// A scalar's value or a tensor's view.
    pub body: ArgBody<'a>,
}

/// What a [`ChainArg`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgBody<'a> {
    /// A scalar and its value's bits.
    Scalar(u64),
    /// A tensor view.
    Tensor {
        /// Monotonic offset of the payload in the thread's arena (0 without a payload).
        payload_offset: u64,
        /// Payload bytes (0: metadata only).
        payload_size: u64,
        /// `(shape, stride)` per dimension, at most [`ARGS_MAX_DIMS`].
        dims: &'a [(u32, u32)],
        /// Element offset of the view into its buffer.
        start_offset: u64,
    },
}

impl ChainArg<'_> {
    /// Words the argument takes in a chain.
    pub const fn words(&self) -> usize {
        match self.body {
            ArgBody::Scalar(_) => 2,
            ArgBody::Tensor { dims, start_offset, .. } => {
                3 + dims.len() + if start_offset != 0 { 1 } else { 0 }
            }
        }
    }

    /// Payload bytes the argument names (0 for a scalar).
    pub const fn payload_size(&self) -> u64 {
        match self.body {
            ArgBody::Tensor { payload_size, .. } => payload_size,
            ArgBody::Scalar(_) => 0,
        }
    }
}

/// Appends `a` to the chain of `len` words at the start of `out` (begun with [`start`]) and
/// counts it in the header; returns the chain's new length. On error the chain is unchanged.
/// Every field of `a` fits its bits by type, so only the chain's room, its argument count and
/// the number of dimensions are checked: a hot path's encoder.
///
/// # Errors
/// [`ArgsChainError::Truncated`] for a `len` shorter than a header or past `out`,
/// [`ArgsChainError::TooManyArgs`], [`ArgsChainError::BadField`] for more than
/// [`ARGS_MAX_DIMS`] dimensions, [`ArgsChainError::Full`] when `out` has no room.
pub fn push_arg(out: &mut [u64], len: usize, a: &ChainArg<'_>) -> Result<usize, ArgsChainError> {
    if len < ARGS_CHAIN_HEADER_WORDS || out.len() < len {
        return Err(ArgsChainError::Truncated { need: ARGS_CHAIN_HEADER_WORDS, have: len });
    }
    let n = ((out[1] & COUNT_BITS) >> 8) as usize;
    if n >= ARGS_CHAIN_MAX_ARGS {
        return Err(ArgsChainError::TooManyArgs);
    }
    let need = len
        + put_arg(&mut out[len..], a).map_err(|e| match e {
            ArgsChainError::Full { need, .. } => {
                ArgsChainError::Full { need: len + need, have: out.len() }
            }
            e => e,
        })?;
    out[1] = (out[1] & !COUNT_BITS) | ((n + 1) as u64) << 8;
    Ok(need)
}

/// Writes `a`'s words (exactly [`ChainArg::words`]) at the start of `out`, as [`push_arg`]
/// appends them, and returns how many: for a writer that encodes a whole chain in one pass and
/// counts its arguments itself ([`header`]). On error nothing is written.
///
/// # Errors
/// [`ArgsChainError::BadField`] for more than [`ARGS_MAX_DIMS`] dimensions,
/// [`ArgsChainError::Full`] when `out` is shorter than the argument.
#[inline]
pub fn put_arg(out: &mut [u64], a: &ChainArg<'_>) -> Result<usize, ArgsChainError> {
    let need = a.words();
    let (kind, nd, start) = match a.body {
        ArgBody::Scalar(_) => (ARG_KIND_SCALAR, 0, 0),
        ArgBody::Tensor { dims, start_offset, .. } => (ARG_KIND_TENSOR, dims.len(), start_offset),
    };
    if nd > ARGS_MAX_DIMS {
        return Err(ArgsChainError::BadField { field: "ndims", value: nd as u64 });
    }
    let Some(out) = out.get_mut(..need) else {
        return Err(ArgsChainError::Full { need, have: out.len() });
    };
    let cf = (if a.truncated { CF_TRUNCATED } else { 0 })
        | (if a.contiguous { CF_CONTIGUOUS } else { 0 })
        | (if start != 0 { CF_START_OFFSET } else { 0 });
    out[0] = u64::from(kind)
        | u64::from(a.role) << 8
        | u64::from(a.dtype) << 16
        | u64::from(a.flags) << 24
        | (nd as u64) << 32
        | cf << 36
        | u64::from(a.arg_index) << 48;
    match a.body {
        ArgBody::Scalar(value) => out[1] = value,
        ArgBody::Tensor { payload_offset, payload_size, dims, start_offset } => {
            out[1] = payload_offset;
            out[2] = payload_size;
            for (w, &(shape, stride)) in out[3..3 + nd].iter_mut().zip(dims) {
                *w = u64::from(shape) | u64::from(stride) << 32;
            }
            if start_offset != 0 {
                out[3 + nd] = start_offset;
            }
        }
    }
    Ok(need)
}

/// The header words of a chain of `head` that holds `args` arguments: with the arguments
/// [`put_arg`] wrote after them, the chain [`start`] and [`push_arg`] build one argument at a
/// time.
///
/// # Errors
/// [`ArgsChainError::BadField`] for a `func_count` above 3, [`ArgsChainError::TooManyArgs`]
/// for more than [`ARGS_CHAIN_MAX_ARGS`] arguments.
#[inline]
pub fn header(
    head: &ArgsChainHead,
    args: usize,
) -> Result<[u64; ARGS_CHAIN_HEADER_WORDS], ArgsChainError> {
    if head.func_count > 3 {
        return Err(ArgsChainError::BadField {
            field: "func_count",
            value: head.func_count.into(),
        });
    }
    if args > ARGS_CHAIN_MAX_ARGS {
        return Err(ArgsChainError::TooManyArgs);
    }
    let [w0, w1, w2] = head_words(head);
    Ok([w0, w1 | (args as u64) << 8, w2])
}

/// Appends argument `r` to the chain of `len` words at the start of `out` (begun with [`start`])
/// and counts it in the header; returns the chain's new length. On error the chain is unchanged.
/// Checks that the record is one a chain carries exactly, then encodes it with [`push_arg`].
///
/// # Errors
/// [`ArgsChainError::HeadMismatch`] for another task, stage or kernel than the header's,
/// [`ArgsChainError::TooManyArgs`], [`ArgsChainError::Full`] when `out` has no room, and
/// [`ArgsChainError::BadField`] for what the format cannot carry exactly: a kind other than
/// tensor or scalar, more than [`ARGS_MAX_DIMS`] dimensions, an `arg_index` above `u16`, a
/// shape or stride set past `ndims`, a scalar with a payload, dimensions or a start offset, or a
/// tensor with a scalar value.
pub fn push(out: &mut [u64], len: usize, r: &ArgsDumpRecord) -> Result<usize, ArgsChainError> {
    let bad = |field: &'static str, value: u64| Err(ArgsChainError::BadField { field, value });
    if len < ARGS_CHAIN_HEADER_WORDS || out.len() < len {
        return Err(ArgsChainError::Truncated { need: ARGS_CHAIN_HEADER_WORDS, have: len });
    }
    // The header as `start` wrote it (its count aside): the argument's fields must match it.
    let [w0, w1, w2] = head_words(&ArgsChainHead::of(r));
    if out[0] != w0 || out[1] & !COUNT_BITS != w1 || out[2] != w2 {
        return Err(ArgsChainError::HeadMismatch);
    }
    let nd = usize::from(r.ndims);
    if nd > ARGS_MAX_DIMS {
        return bad("ndims", nd as u64);
    }
    let Ok(arg_index) = u16::try_from(r.arg_index) else {
        return bad("arg_index", r.arg_index.into());
    };
    if r.shapes[nd..].iter().chain(&r.strides[nd..]).any(|&v| v != 0) {
        return bad("shapes", nd as u64);
    }
    let mut dims = [(0u32, 0u32); ARGS_MAX_DIMS];
    for (d, (&shape, &stride)) in dims.iter_mut().zip(r.shapes.iter().zip(&r.strides)) {
        *d = (shape, stride);
    }
    let body = match r.kind {
        ARG_KIND_SCALAR => {
            if nd != 0 || r.payload_offset != 0 || r.payload_size != 0 || r.start_offset != 0 {
                return bad("scalar", r.payload_size);
            }
            ArgBody::Scalar(r.scalar_value)
        }
        ARG_KIND_TENSOR => {
            if r.scalar_value != 0 {
                return bad("scalar_value", r.scalar_value);
            }
            ArgBody::Tensor {
                payload_offset: r.payload_offset,
                payload_size: r.payload_size,
                dims: &dims[..nd],
                start_offset: r.start_offset,
            }
        }
        k => return bad("kind", k.into()),
    };
    let arg = ChainArg {
        role: r.role,
        dtype: r.dtype,
        flags: r.flags,
        arg_index,
        truncated: r.truncated != 0,
        contiguous: r.is_contiguous != 0,
        body,
    };
    push_arg(out, len, &arg)
}

fn parse_head(w: &[u64]) -> Result<ArgsChainHead, ArgsChainError> {
    if w.len() < ARGS_CHAIN_HEADER_WORDS {
        return Err(ArgsChainError::Truncated { need: ARGS_CHAIN_HEADER_WORDS, have: w.len() });
    }
    let func_count = (w[1] >> 16) as u8;
    if func_count > 3 {
        return Err(ArgsChainError::BadField { field: "func_count", value: func_count.into() });
    }
    if (w[1] >> 24) as u8 != 0 || w[2] >> 16 != 0 {
        return Err(ArgsChainError::BadField { field: "reserved", value: w[1] });
    }
    Ok(ArgsChainHead {
        task_id: w[0],
        stage: w[1] as u8,
        func_count,
        func_ids: [(w[1] >> 32) as u16, (w[1] >> 48) as u16, w[2] as u16],
    })
}

/// Words of the argument whose first word is `a0` (validated).
fn parsed_arg_words(a0: u64) -> Result<usize, ArgsChainError> {
    let kind = a0 as u8;
    let nd = ((a0 >> 32) & 0xF) as usize;
    let cf = (a0 >> 36) & 0xF;
    if (a0 >> 40) as u8 != 0 || cf & !(CF_TRUNCATED | CF_CONTIGUOUS | CF_START_OFFSET) != 0 {
        return Err(ArgsChainError::BadField { field: "reserved", value: a0 });
    }
    match kind {
        ARG_KIND_SCALAR if nd == 0 && cf & CF_START_OFFSET == 0 => Ok(2),
        ARG_KIND_TENSOR if nd <= ARGS_MAX_DIMS => {
            Ok(3 + nd + usize::from(cf & CF_START_OFFSET != 0))
        }
        ARG_KIND_SCALAR | ARG_KIND_TENSOR => {
            Err(ArgsChainError::BadField { field: "ndims", value: nd as u64 })
        }
        k => Err(ArgsChainError::BadField { field: "kind", value: k.into() }),
    }
}

/// One chain as the host reads it (borrowing the buffer's words).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArgsChain<'a> {
    /// The arguments' shared fields.
    pub head: ArgsChainHead,
    args: usize,
    /// The argument words (after the header), validated by [`parse_chain`].
    body: &'a [u64],
}

impl<'a> ArgsChain<'a> {
    /// Arguments in the chain.
    pub fn arg_count(&self) -> usize {
        self.args
    }

    /// The arguments, in order, as the records the device described.
    pub fn records(&self) -> impl Iterator<Item = ArgsDumpRecord> + 'a {
        let (head, mut body) = (self.head, self.body);
        (0..self.args).map(move |_| {
            // Validated by `parse_chain`.
            let n = parsed_arg_words(body[0]).unwrap_or(body.len());
            let (w, rest) = body.split_at(n);
            body = rest;
            decode_arg(&head, w)
        })
    }

    /// Each argument's payload as `(payload_offset, payload_size)`, `None` for a scalar, in
    /// order: what a host needs while the run is live (to copy payloads out of the arena before
    /// acknowledging them), read from the argument words without decoding the records.
    pub fn payloads(&self) -> impl Iterator<Item = Option<(u64, u64)>> + 'a {
        let mut body = self.body;
        (0..self.args).map(move |_| {
            // Validated by `parse_chain`: a tensor's words include its offset and size.
            let n = parsed_arg_words(body[0]).unwrap_or(body.len());
            let (w, rest) = body.split_at(n);
            body = rest;
            (w[0] as u8 != ARG_KIND_SCALAR).then(|| (w[1], w[2]))
        })
    }

    /// Offset of each argument's first word from the chain's first (header) word, in order:
    /// what [`arg_record`] takes to decode one argument alone.
    pub fn arg_offsets(&self) -> impl Iterator<Item = usize> + 'a {
        let (mut body, mut at) = (self.body, ARGS_CHAIN_HEADER_WORDS);
        (0..self.args).map(move |_| {
            // Validated by `parse_chain`.
            let n = parsed_arg_words(body[0]).unwrap_or(body.len());
            body = &body[n..];
            at += n;
            at - n
        })
    }
}

/// The record of one argument: `a0` and the words after it (as many as it takes).
fn decode_arg(head: &ArgsChainHead, w: &[u64]) -> ArgsDumpRecord {
    let a0 = w[0];
    let nd = ((a0 >> 32) & 0xF) as usize;
    let cf = (a0 >> 36) & 0xF;
    let mut r = ArgsDumpRecord {
        task_id: head.task_id,
        stage: head.stage,
        func_count: head.func_count,
        func_ids: head.func_ids,
        kind: a0 as u8,
        role: (a0 >> 8) as u8,
        dtype: (a0 >> 16) as u8,
        flags: (a0 >> 24) as u8,
        ndims: nd as u8,
        truncated: u8::from(cf & CF_TRUNCATED != 0),
        is_contiguous: u8::from(cf & CF_CONTIGUOUS != 0),
        arg_index: u32::from((a0 >> 48) as u16),
        ..ArgsDumpRecord::default()
    };
    if r.kind == ARG_KIND_SCALAR {
        r.scalar_value = w[1];
    } else {
        r.payload_offset = w[1];
        r.payload_size = w[2];
        for d in 0..nd {
            r.shapes[d] = w[3 + d] as u32;
            r.strides[d] = (w[3 + d] >> 32) as u32;
        }
        if cf & CF_START_OFFSET != 0 {
            r.start_offset = w[3 + nd];
        }
    }
    r
}

/// The record of the one argument `at` words into the chain that starts `chain` (an offset
/// [`ArgsChain::arg_offsets`] gave): O(1), so a host can keep a run's chains as they came and
/// decode an argument when it is read. Checks the header and that argument (not the others).
///
/// # Errors
/// As [`parse_chain`], for the header and the argument at `at` (which must lie past the header).
pub fn arg_record(chain: &[u64], at: usize) -> Result<ArgsDumpRecord, ArgsChainError> {
    let head = parse_head(chain)?;
    if at < ARGS_CHAIN_HEADER_WORDS {
        return Err(ArgsChainError::BadField { field: "argument offset", value: at as u64 });
    }
    let Some(&a0) = chain.get(at) else {
        return Err(ArgsChainError::Truncated { need: at + 1, have: chain.len() });
    };
    let need = at + parsed_arg_words(a0)?;
    if need > chain.len() {
        return Err(ArgsChainError::Truncated { need, have: chain.len() });
    }
    Ok(decode_arg(&head, &chain[at..need]))
}

/// Parses the chain at the start of `words`; returns it and the words it spans.
///
/// # Errors
/// [`ArgsChainError::Truncated`] when the words end inside it, [`ArgsChainError::BadField`] for
/// a header or argument word outside the format.
pub fn parse_chain(words: &[u64]) -> Result<(ArgsChain<'_>, usize), ArgsChainError> {
    let head = parse_head(words)?;
    let args = (words[1] >> 8) as u8 as usize;
    let mut at = ARGS_CHAIN_HEADER_WORDS;
    for _ in 0..args {
        let Some(&a0) = words.get(at) else {
            return Err(ArgsChainError::Truncated { need: at + 1, have: words.len() });
        };
        let need = at + parsed_arg_words(a0)?;
        if need > words.len() {
            return Err(ArgsChainError::Truncated { need, have: words.len() });
        }
        at = need;
    }
    Ok((ArgsChain { head, args, body: &words[ARGS_CHAIN_HEADER_WORDS..at] }, at))
}

/// The chains of one buffer's words, in order; the first malformed one yields its error and
/// ends the iteration (the words after it cannot be framed).
pub fn chains(words: &[u64]) -> impl Iterator<Item = Result<ArgsChain<'_>, ArgsChainError>> {
    crate::frames(words, parse_chain)
}

#[cfg(test)]
mod tests;
