//! Replay of a dumped task: its kernel run on the host over the dumped inputs, compared with the
//! dumped outputs (`ferry dump DIR replay --task N`).

use crate::device::ops::{DeviceOps, TranslateError};
use ferry_abi::records::DType;
use ferry_profile::{ArgsDump, DumpedArg};

/// Host memory a replayed kernel runs on: buffer `i` lives at device address `(i + 1) << 32`.
struct HostBuffers {
    bufs: Vec<Box<[u32]>>,
}

// SAFETY: `translate` returns pointers into the boxed buffers, which live as long as `self` and
// are only touched through `F32Slice`'s atomic accesses; the other methods never touch memory.
unsafe impl DeviceOps for HostBuffers {
    fn translate(&self, addr: u64, len: u64) -> Result<*mut u8, TranslateError> {
        let i = (addr >> 32) as usize;
        let off = addr & 0xffff_ffff;
        let err = |reason: &str| TranslateError { addr, len, reason: reason.into() };
        let b = i.checked_sub(1).and_then(|i| self.bufs.get(i)).ok_or_else(|| err("no buffer"))?;
        if off + len > b.len() as u64 * 4 {
            return Err(err("out of bounds"));
        }
        Ok(b.as_ptr().cast::<u8>().wrapping_add(off as usize).cast_mut())
    }
    fn reg_read(&self, _: u64, _: u32) -> u32 {
        0
    }
    fn reg_write_aicpu(&self, _: u64, _: u32, _: u32) {}
    fn reg_write_core(&self, _: u64, _: u32, _: u32) {}
    fn core_wait(
        &self,
        _: u64,
        _: u32,
        _: &mut dyn FnMut(u32) -> bool,
        _: Option<std::time::Duration>,
    ) -> Option<u32> {
        None
    }
    fn aicpu_wait(&self, _: &mut dyn FnMut() -> bool, _: Option<std::time::Duration>) -> bool {
        false
    }
    fn notify_aicpu(&self) {}
    fn clock_cycles(&self) -> u64 {
        0
    }
    fn clock_hz(&self) -> u64 {
        1
    }
}

/// One argument of a replayed task.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayArg {
    /// Argument index.
    pub index: u32,
    /// Its dtype, as the dump records it.
    pub dtype: DType,
    /// Elements the dump holds after completion (each element's bits, zero-extended).
    pub dumped: Vec<u64>,
    /// Elements the replay computed (each element's bits, zero-extended).
    pub replayed: Vec<u64>,
}

impl ReplayArg {
    /// Whether the replay reproduced the dumped output bit for bit.
    pub fn matches(&self) -> bool {
        self.dumped == self.replayed
    }
}

/// Why an argument can have no payload, for the message that says one is missing.
const NO_PAYLOAD: &str = " (level 3 keeps the payloads of tensors marked with dump(...) only: \
                          mark them, or dump with --dump-args 2)";

/// Why a task could not be replayed.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The dump has no such task, or lacks a payload the kernel needs.
    #[error("task {task}: {what}")]
    Missing {
        /// Task id.
        task: u64,
        /// What is missing.
        what: String,
    },
    /// The dump's metadata for the task is inconsistent, or describes what a replay cannot
    /// reproduce (an unknown dtype, a strided view, a truncated payload).
    #[error("task {task}: {what}")]
    Invalid {
        /// Task id.
        task: u64,
        /// What is wrong.
        what: String,
    },
    /// The kernel failed on the dumped inputs.
    #[error("task {task}: kernel failed: {fault}")]
    Kernel {
        /// Task id.
        task: u64,
        /// The fault.
        fault: crate::error::KernelFault,
    },
}

/// `b` as little-endian words, the last one zero-padded.
fn words(b: &[u8]) -> Box<[u32]> {
    b.chunks(4)
        .map(|c| {
            let mut w = [0u8; 4];
            w[..c.len()].copy_from_slice(c);
            u32::from_le_bytes(w)
        })
        .collect()
}

/// `b` as little-endian `dtype` elements, each zero-extended to 64 bits.
fn elements(b: &[u8], dtype: DType) -> Vec<u64> {
    b.chunks_exact(dtype.size())
        .map(|c| {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            u64::from_le_bytes(w)
        })
        .collect()
}

/// The most tensor arguments a task has ([`MAX_TASK_TENSORS`]) and scalars after them.
///
/// [`MAX_TASK_TENSORS`]: crate::device::image::MAX_TASK_TENSORS
const MAX_TENSORS: u32 = crate::device::image::MAX_TASK_TENSORS as u32;
const MAX_SCALARS: u32 = crate::device::image::MAX_TASK_SCALARS as u32;

/// The validated tensor arguments of one task: per tensor index its before-dispatch and
/// after-completion records.
type Slots<'a> = Vec<[Option<&'a DumpedArg>; 2]>;

/// Checks the task's records against what the runtime dumps and a replay can reproduce, and
/// sorts its tensors by index. Everything a buffer is sized by comes from a payload that
/// [`ArgsDump::payload`] found inside `args.bin`, never from a count the file states.
fn validate<'a>(d: &ArgsDump, task: u64, args: &[&'a DumpedArg]) -> Result<Slots<'a>, ReplayError> {
    let invalid = |what: String| ReplayError::Invalid { task, what };
    let mut tensors = 0u32;
    for a in args {
        ferry_profile::validate_arg(a, d.bin.len())
            .map_err(|e| invalid(format!("arg {}: {e}", a.arg_index)))?;
        match &*a.kind {
            "tensor" if a.arg_index >= MAX_TENSORS => {
                return Err(invalid(format!(
                    "tensor arg_index {} (a task has at most {MAX_TENSORS} tensors)",
                    a.arg_index
                )))
            }
            "tensor" => tensors = tensors.max(a.arg_index + 1),
            _ => {}
        }
    }
    let mut slots: Slots<'a> = vec![[None; 2]; tensors as usize];
    for a in args {
        match &*a.kind {
            "tensor" => {
                if DType::from_name(&a.dtype).is_none() {
                    return Err(invalid(format!(
                        "arg {} is {}: the replay needs a known dtype",
                        a.arg_index, a.dtype
                    )));
                }
                if !a.is_contiguous || a.start_offset != 0 || a.shape.len() > 1 {
                    return Err(invalid(format!(
                        "arg {} is a view (shape {:?}, strides {:?}, offset {}): the replay \
                         needs whole contiguous buffers",
                        a.arg_index, a.shape, a.strides, a.start_offset
                    )));
                }
                if a.truncated || a.overwritten {
                    return Err(invalid(format!(
                        "arg {}: its payload was {} on the device",
                        a.arg_index,
                        if a.truncated { "truncated" } else { "overwritten" }
                    )));
                }
                let stage = usize::from(a.stage != "before_dispatch");
                let slot = &mut slots[a.arg_index as usize][stage];
                if slot.replace(a).is_some() {
                    return Err(invalid(format!(
                        "arg {} is dumped twice at {}",
                        a.arg_index, a.stage
                    )));
                }
            }
            _ => {
                let first = tensors;
                if a.arg_index < first || a.arg_index >= first + MAX_SCALARS {
                    return Err(invalid(format!(
                        "scalar arg_index {} (scalars follow the {tensors} tensors, at most \
                         {MAX_SCALARS})",
                        a.arg_index
                    )));
                }
            }
        }
    }
    for (i, s) in slots.iter().enumerate() {
        match s {
            [None, None] => return Err(invalid(format!("tensor arg {i} is not in the dump"))),
            [Some(b), Some(a)] if b.numel != a.numel => {
                return Err(invalid(format!(
                    "arg {i} has {} elements before dispatch but {} after completion",
                    b.numel, a.numel
                )))
            }
            _ => {}
        }
    }
    Ok(slots)
}

/// Replays task `task` from a level ≥ 1 args dump: rebuilds its arguments from the
/// before-dispatch payloads (outputs start zeroed), runs its kernel over every block on the host,
/// and returns each after-completion argument with what the replay computed.
///
/// Before anything is allocated the task's records are checked: every argument as
/// [`ferry_profile::validate_arg`] does (closed sets, `numel` × dtype size = payload size,
/// payloads inside `args.bin`), tensor indices below the runtime's tensor count and each present,
/// scalars after the tensors, one record per index and stage, whole contiguous buffers of a known
/// dtype with whole payloads. Buffers are sized by payloads found in `args.bin`. A view kernel's
/// arguments are dumped as the contiguous ranges their views span, in their dtypes, and its
/// scalars carry the views, so its replay runs every dtype.
///
/// # Errors
/// [`ReplayError::Missing`] when the dump lacks the task or a payload, [`ReplayError::Invalid`]
/// when its records break the rules above, [`ReplayError::Kernel`] when the kernel fails.
pub fn replay_task(d: &ArgsDump, task: u64) -> Result<Vec<ReplayArg>, ReplayError> {
    let missing = |what: &str| ReplayError::Missing { task, what: what.into() };
    let rows: Vec<std::borrow::Cow<'_, DumpedArg>> = d.args.of_task(task).collect();
    let args: Vec<&DumpedArg> = rows.iter().map(|a| &**a).collect();
    if args.is_empty() {
        return Err(missing("not in the dump"));
    }
    let kernel = args[0]
        .func_id
        .first()
        .copied()
        .filter(|&f| f >= 0)
        .ok_or_else(|| missing("no kernel id"))?;
    let slots = validate(d, task, &args)?;
    let tensor_count = slots.len();
    let mut scalars: Vec<(u32, u64)> = args
        .iter()
        .filter(|a| a.kind == "scalar")
        .map(|a| (a.arg_index, a.value.unwrap_or(0)))
        .collect();
    scalars.sort_unstable();
    // Each tensor in the dtype the kernel reads it as: an f32 kernel's are FLOAT32, a view
    // kernel's what its operand word (scalar `1 + i`) names.
    let views = crate::device::kernels::spec(kernel as u32).is_some_and(|s| s.views);
    for (i, a) in
        slots.iter().enumerate().flat_map(|(i, s)| s.iter().flatten().map(move |a| (i, a)))
    {
        let want = match scalars.get(1 + i) {
            _ if !views => Some(DType::Float32),
            Some(&(_, w)) => DType::from_u8((w & 0xf) as u8),
            None => None,
        };
        if want.is_none_or(|w| w.name() != a.dtype) {
            return Err(ReplayError::Invalid {
                task,
                what: format!(
                    "arg {i} is {}, the kernel reads it as {}",
                    a.dtype,
                    want.map_or("an unknown dtype", |w| w.name())
                ),
            });
        }
    }
    // A dumped argument's payload, or why there is none (`what`: input or output `i`).
    let payload = |a, what: &str, i: usize| {
        d.payload(a).ok_or_else(|| missing(&format!("no payload for {what} {i}{NO_PAYLOAD}")))
    };
    let mut bufs: Vec<Box<[u32]>> = Vec::with_capacity(tensor_count);
    for (i, [before, after]) in slots.iter().enumerate() {
        let words: Box<[u32]> = match before {
            Some(a) => words(&payload(a, "input", i)?),
            // An output only: as large as its dumped payload (checked against numel above).
            None => {
                let a = after.expect("validate: every index has a record");
                let p = payload(a, "output", i)?;
                vec![0u32; p.len().div_ceil(4)].into()
            }
        };
        bufs.push(words);
    }
    let ops = HostBuffers { bufs };
    let slices: Vec<crate::device::image::F32Slice> = (0..tensor_count)
        .map(|i| {
            crate::device::image::F32Slice::new(
                &ops,
                ((i as u64) + 1) << 32,
                ops.bufs[i].len() as u64 * 4,
            )
            .map_err(|e| missing(&e.to_string()))
        })
        .collect::<Result<_, _>>()?;
    let sc: Vec<u64> = scalars.iter().map(|s| s.1).collect();
    crate::device::kernels::execute(&crate::device::kernels::KernelCall {
        kernel: kernel as u32,
        tensors: &slices,
        scalars: &sc,
        block_idx: 0,
        block_dim: 1,
    })
    .map_err(|fault| ReplayError::Kernel { task, fault })?;
    let mut out = Vec::new();
    for (i, [_, after]) in slots.iter().enumerate() {
        let Some(a) = after else { continue };
        let p = payload(a, "output", i)?;
        let s = &slices[i];
        // A known dtype: `validate` checked it.
        let dtype = DType::from_name(&a.dtype).unwrap_or(DType::UInt8);
        let dumped = elements(&p, dtype);
        out.push(ReplayArg {
            index: a.arg_index,
            dtype,
            replayed: (0..dumped.len() as u64).map(|k| s.load_elem(dtype, k)).collect(),
            dumped,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod replay_tests {
    use super::*;
    use ferry_abi::records::{self as abi, ArgsDumpRecord, DType};

    fn tensor(stage: u8, role: u8, index: u32) -> DumpedArg {
        let mut r = ArgsDumpRecord {
            task_id: 9,
            role,
            stage,
            ndims: 1,
            arg_index: index,
            dtype: DType::Float32 as u8,
            is_contiguous: 1,
            kind: abi::ARG_KIND_TENSOR,
            func_count: 1,
            ..Default::default()
        };
        r.func_ids[0] = crate::device::kernels::K_COPY as u16;
        r.shapes[0] = 2;
        r.strides[0] = 1;
        DumpedArg::from_record(&r).unwrap()
    }

    fn bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn replay_of_a_missing_task_is_an_error() {
        let d = ArgsDump::default();
        assert!(matches!(replay_task(&d, 7), Err(ReplayError::Missing { task: 7, .. })));
    }

    #[test]
    fn a_replay_reproduces_a_copy_and_flags_a_tampered_output() {
        let mut d = ArgsDump::default();
        d.push(
            tensor(abi::ARG_STAGE_BEFORE_DISPATCH, abi::ARG_ROLE_INPUT, 0),
            Some(&bytes(&[1.0, 2.0])),
        );
        d.push(
            tensor(abi::ARG_STAGE_AFTER_COMPLETION, abi::ARG_ROLE_OUTPUT, 1),
            Some(&bytes(&[1.0, 2.0])),
        );
        let r = replay_task(&d, 9).unwrap();
        assert_eq!(r.len(), 1);
        assert!(r[0].matches());
        // The same dump with a wrong output: the replay says so.
        let mut bad = ArgsDump::default();
        bad.push(
            tensor(abi::ARG_STAGE_BEFORE_DISPATCH, abi::ARG_ROLE_INPUT, 0),
            Some(&bytes(&[1.0, 2.0])),
        );
        bad.push(
            tensor(abi::ARG_STAGE_AFTER_COMPLETION, abi::ARG_ROLE_OUTPUT, 1),
            Some(&bytes(&[1.0, 3.0])),
        );
        let r = replay_task(&bad, 9).unwrap();
        assert!(!r[0].matches());
        assert_eq!(r[0].replayed, [1.0f32, 2.0].map(|x| u64::from(x.to_bits())));
        // An output element in another dtype than the dump says differs too.
        let mut wrong = ArgsDump::default();
        wrong.push(
            tensor(abi::ARG_STAGE_BEFORE_DISPATCH, abi::ARG_ROLE_INPUT, 0),
            Some(&bytes(&[1.0, 2.0])),
        );
        wrong.push(
            tensor(abi::ARG_STAGE_AFTER_COMPLETION, abi::ARG_ROLE_OUTPUT, 1),
            Some(&bytes(&[1.0, -2.0])),
        );
        assert!(!replay_task(&wrong, 9).unwrap()[0].matches());
        // An f32 kernel's output dumped as another dtype is inconsistent metadata.
        let mut int8 = ArgsDump::default();
        int8.push(
            tensor(abi::ARG_STAGE_BEFORE_DISPATCH, abi::ARG_ROLE_INPUT, 0),
            Some(&bytes(&[1.0, 2.0])),
        );
        let mut r = ArgsDumpRecord {
            task_id: 9,
            role: abi::ARG_ROLE_OUTPUT,
            stage: abi::ARG_STAGE_AFTER_COMPLETION,
            ndims: 1,
            arg_index: 1,
            dtype: DType::Int8 as u8,
            is_contiguous: 1,
            kind: abi::ARG_KIND_TENSOR,
            func_count: 1,
            ..Default::default()
        };
        (r.func_ids[0], r.shapes[0], r.strides[0]) = (crate::device::kernels::K_COPY as u16, 8, 1);
        int8.push(DumpedArg::from_record(&r).unwrap(), Some(&bytes(&[1.0, 2.0])));
        match replay_task(&int8, 9) {
            Err(ReplayError::Invalid { what, .. }) => {
                assert_eq!(what, "arg 1 is INT8, the kernel reads it as FLOAT32")
            }
            r => panic!("{r:?}"),
        }
        // An input without its payload (metadata-only dump) cannot be replayed.
        let mut meta = ArgsDump::default();
        meta.push(tensor(abi::ARG_STAGE_BEFORE_DISPATCH, abi::ARG_ROLE_INPUT, 0), None);
        assert!(matches!(replay_task(&meta, 9), Err(ReplayError::Missing { .. })));
    }

    /// A dumped record of a view kernel's task 5: tensor `index` of `dtype` and `numel`
    /// elements at `stage`, or scalar `index` with `value`.
    fn typed(stage: u8, role: u8, index: u32, dtype: DType, numel: u32) -> DumpedArg {
        let mut r = ArgsDumpRecord {
            task_id: 5,
            role,
            stage,
            ndims: 1,
            arg_index: index,
            dtype: dtype as u8,
            is_contiguous: 1,
            kind: abi::ARG_KIND_TENSOR,
            func_count: 1,
            ..Default::default()
        };
        r.func_ids[0] = crate::device::kernels::K_CAST_ND as u16;
        r.shapes[0] = numel;
        r.strides[0] = 1;
        DumpedArg::from_record(&r).unwrap()
    }

    fn scalar(index: u32, value: u64) -> DumpedArg {
        let r = ArgsDumpRecord {
            task_id: 5,
            role: abi::ARG_ROLE_SCALAR,
            stage: abi::ARG_STAGE_BEFORE_DISPATCH,
            arg_index: index,
            dtype: DType::UInt64 as u8,
            kind: abi::ARG_KIND_SCALAR,
            scalar_value: value,
            func_count: 1,
            func_ids: [crate::device::kernels::K_CAST_ND as u16, 0, 0],
            ..Default::default()
        };
        DumpedArg::from_record(&r).unwrap()
    }

    /// A view kernel's task replays in its dtypes: int8 in, bf16 out, and a wrong element is
    /// found.
    #[test]
    fn a_view_kernel_replays_in_its_dtypes() {
        use ferry_abi::layout::{encode_operand, encode_shape};
        let dump = |out: [u16; 4]| {
            let mut d = ArgsDump::default();
            let (before, after) = (abi::ARG_STAGE_BEFORE_DISPATCH, abi::ARG_STAGE_AFTER_COMPLETION);
            d.push(
                typed(before, abi::ARG_ROLE_INPUT, 0, DType::Int8, 4),
                Some(&[1, 0xfe, 3, 0x80]),
            );
            let out: Vec<u8> = out.iter().flat_map(|h| h.to_le_bytes()).collect();
            d.push(typed(after, abi::ARG_ROLE_OUTPUT, 1, DType::BFloat16, 4), Some(&out));
            d.push(scalar(2, encode_shape(&[4]).unwrap()), None);
            d.push(scalar(3, encode_operand(DType::Int8, &[1]).unwrap()), None);
            d.push(scalar(4, encode_operand(DType::BFloat16, &[1]).unwrap()), None);
            d
        };
        let bf = |v: f32| ferry_abi::records::DType::BFloat16.from_f32(v) as u16;
        let good = [bf(1.0), bf(-2.0), bf(3.0), bf(-128.0)];
        let r = replay_task(&dump(good), 5).unwrap();
        assert_eq!((r.len(), r[0].dtype), (1, DType::BFloat16));
        assert!(r[0].matches(), "{:?}", r[0]);
        let mut bad = good;
        bad[3] = bf(128.0);
        let r = replay_task(&dump(bad), 5).unwrap();
        assert!(!r[0].matches());
        assert_eq!(r[0].replayed[3], u64::from(good[3]));
    }
}
