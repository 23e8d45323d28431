extern crate std;
use std::vec::Vec;

use proptest::prelude::*;

use super::*;
use crate::records::{
    ARGS_FLAG_INDEX_AMBIGUOUS, ARG_ROLE_INOUT, ARG_ROLE_INPUT, ARG_ROLE_OUTPUT, ARG_ROLE_SCALAR,
    ARG_STAGE_AFTER_COMPLETION, ARG_STAGE_BEFORE_DISPATCH,
};

fn tensor(index: u32, ndims: u8) -> ArgsDumpRecord {
    let mut r = ArgsDumpRecord {
        task_id: 0x1234_5678_9abc,
        role: ARG_ROLE_INPUT,
        stage: ARG_STAGE_BEFORE_DISPATCH,
        ndims,
        arg_index: index,
        dtype: 2,
        is_contiguous: 1,
        payload_offset: 4096 * u64::from(index),
        payload_size: 256,
        kind: ARG_KIND_TENSOR,
        func_ids: [5, 9, 0xFFFF],
        func_count: 2,
        ..Default::default()
    };
    for d in 0..usize::from(ndims) {
        r.shapes[d] = 2 + d as u32;
        r.strides[d] = 1 << d;
    }
    r
}

fn scalar(index: u32, value: u64) -> ArgsDumpRecord {
    ArgsDumpRecord {
        kind: ARG_KIND_SCALAR,
        role: ARG_ROLE_SCALAR,
        ndims: 0,
        shapes: [0; 5],
        strides: [0; 5],
        payload_offset: 0,
        payload_size: 0,
        scalar_value: value,
        ..tensor(index, 0)
    }
}

fn encode(recs: &[ArgsDumpRecord], out: &mut [u64]) -> Result<usize, ArgsChainError> {
    let mut len = start(out, &ArgsChainHead::of(&recs[0]))?;
    for r in recs {
        len = push(out, len, r)?;
    }
    Ok(len)
}

fn decode(words: &[u64]) -> Vec<ArgsDumpRecord> {
    let (c, n) = parse_chain(words).unwrap();
    assert_eq!(n, words.len(), "the chain spans exactly the words written");
    assert_eq!(c.arg_count(), c.records().count());
    let recs: Vec<ArgsDumpRecord> = c.records().collect();
    // The payloads read without decoding are the records' own.
    let payloads: Vec<Option<(u64, u64)>> = c.payloads().collect();
    let want: Vec<Option<(u64, u64)>> = recs
        .iter()
        .map(|r| (r.kind == ARG_KIND_TENSOR).then_some((r.payload_offset, r.payload_size)))
        .collect();
    assert_eq!(payloads, want);
    // Each argument decodes alone, from its offset, to the record the walk gives.
    let alone: Vec<ArgsDumpRecord> =
        c.arg_offsets().map(|at| arg_record(words, at).unwrap()).collect();
    assert_eq!(alone, recs);
    recs
}

#[test]
fn one_argument_decodes_alone_and_a_bad_offset_is_a_typed_error() {
    let mut out = [0u64; 64];
    let recs = [tensor(0, 2), scalar(1, 9), tensor(2, 1)];
    let len = encode(&recs, &mut out).unwrap();
    let (c, _) = parse_chain(&out[..len]).unwrap();
    let at: Vec<usize> = c.arg_offsets().collect();
    assert_eq!(at, [3, 3 + 5, 3 + 5 + 2]);
    assert_eq!(arg_record(&out[..len], at[2]).unwrap(), recs[2]);
    // Inside the header, past the words, or cut short. (An offset inside an argument may read
    // as another valid argument: offsets come from `arg_offsets`.)
    assert!(matches!(arg_record(&out[..len], 1), Err(ArgsChainError::BadField { .. })));
    assert!(matches!(arg_record(&out[..len], len), Err(ArgsChainError::Truncated { .. })));
    assert!(matches!(arg_record(&out[..len - 1], at[2]), Err(ArgsChainError::Truncated { .. })));
    // A bad header fails the argument too.
    let mut bad = out;
    bad[1] |= 0xFF << 24;
    assert!(matches!(arg_record(&bad[..len], at[0]), Err(ArgsChainError::BadField { .. })));
}

#[test]
fn every_shape_of_argument_round_trips_in_the_words_it_announces() {
    let mut recs = Vec::new();
    for nd in 0..=ARGS_MAX_DIMS as u8 {
        recs.push(tensor(recs.len() as u32, nd));
    }
    let mut odd = tensor(recs.len() as u32, 3);
    odd.start_offset = 17;
    odd.truncated = 1;
    odd.is_contiguous = 0;
    odd.flags = ARGS_FLAG_INDEX_AMBIGUOUS;
    odd.role = ARG_ROLE_INOUT;
    recs.push(odd);
    recs.push(scalar(recs.len() as u32, u64::MAX));
    recs.push(scalar(u32::from(u16::MAX), 0));
    let mut out = [0u64; 128];
    let len = encode(&recs, &mut out).unwrap();
    let expect: usize = ARGS_CHAIN_HEADER_WORDS + recs.iter().map(arg_words).sum::<usize>();
    assert_eq!(len, expect);
    assert_eq!(decode(&out[..len]), recs);
    // A header alone is a chain of no arguments.
    let n = start(&mut out, &ArgsChainHead::of(&recs[0])).unwrap();
    assert_eq!(decode(&out[..n]), []);
}

#[test]
fn the_storm_task_takes_sixteen_words_instead_of_three_records() {
    let mut out = [0u64; 64];
    let input = tensor(0, 1);
    let before = encode(&[input, scalar(1, 3)], &mut out).unwrap();
    let output =
        ArgsDumpRecord { role: ARG_ROLE_OUTPUT, stage: ARG_STAGE_AFTER_COMPLETION, ..input };
    let after = encode(&[output], &mut out).unwrap();
    // 128 bytes against three 128-byte records.
    assert_eq!((before, after), (9, 7));
    assert_eq!(8 * (before + after), core::mem::size_of::<ArgsDumpRecord>());
}

#[test]
fn a_chain_holds_at_most_255_arguments_and_refuses_the_next_unchanged() {
    let mut out = std::vec![0u64; ARGS_CHAIN_HEADER_WORDS + 256 * 2];
    let recs: Vec<_> = (0..255).map(|i| scalar(i, u64::from(i))).collect();
    let len = encode(&recs, &mut out).unwrap();
    let before = out.clone();
    assert_eq!(push(&mut out, len, &scalar(255, 0)), Err(ArgsChainError::TooManyArgs));
    assert_eq!(out, before);
    assert_eq!(decode(&out[..len]), recs);
}

#[test]
fn what_the_format_cannot_carry_exactly_is_refused_and_leaves_the_chain_unchanged() {
    let mut out = [0u64; 32];
    let t = tensor(0, 2);
    let len = encode(&[t], &mut out).unwrap();
    let before = out;
    let bad = |r: ArgsDumpRecord| {
        let mut o = before;
        let e = push(&mut o, len, &r).unwrap_err();
        assert_eq!(o, before, "{e}");
        e
    };
    assert_eq!(bad(ArgsDumpRecord { task_id: 1, ..t }), ArgsChainError::HeadMismatch);
    assert_eq!(bad(ArgsDumpRecord { stage: 1 - t.stage, ..t }), ArgsChainError::HeadMismatch);
    assert_eq!(bad(ArgsDumpRecord { func_count: 1, ..t }), ArgsChainError::HeadMismatch);
    let field = |e| match e {
        ArgsChainError::BadField { field, .. } => field,
        other => panic!("{other}"),
    };
    assert_eq!(field(bad(ArgsDumpRecord { kind: 2, ..t })), "kind");
    assert_eq!(field(bad(ArgsDumpRecord { ndims: 6, ..t })), "ndims");
    assert_eq!(field(bad(ArgsDumpRecord { arg_index: 1 << 16, ..t })), "arg_index");
    let mut past = t;
    past.strides[4] = 1;
    assert_eq!(field(bad(past)), "shapes");
    assert_eq!(field(bad(ArgsDumpRecord { payload_size: 4, ..scalar(1, 1) })), "scalar");
    assert_eq!(field(bad(ArgsDumpRecord { start_offset: 4, ..scalar(1, 1) })), "scalar");
    assert_eq!(field(bad(ArgsDumpRecord { scalar_value: 4, ..t })), "scalar_value");
    // No room: the exact need is reported.
    let mut small = [0u64; ARGS_CHAIN_HEADER_WORDS + 4];
    let l = start(&mut small, &ArgsChainHead::of(&t)).unwrap();
    assert_eq!(push(&mut small, l, &t), Err(ArgsChainError::Full { need: 8, have: 7 }));
    assert_eq!(
        start(&mut small[..2], &ArgsChainHead::of(&t)),
        Err(ArgsChainError::Full { need: 3, have: 2 })
    );
}

#[test]
fn malformed_words_are_typed_errors_never_panics() {
    let mut out = [0u64; 64];
    let recs = [tensor(0, 2), scalar(1, 9), tensor(2, 1)];
    let len = encode(&recs, &mut out).unwrap();
    // Every cut inside the chain is Truncated.
    for cut in 0..len {
        match parse_chain(&out[..cut]) {
            Err(ArgsChainError::Truncated { need, have }) => assert!(need > have, "{cut}"),
            other => panic!("cut at {cut}: {other:?}"),
        }
    }
    // Reserved bits, an unknown kind, too many dimensions.
    let arg0 = ARGS_CHAIN_HEADER_WORDS;
    for (at, word, field) in [
        (1, out[1] | 1 << 24, "reserved"),
        (2, out[2] | 1 << 20, "reserved"),
        (1, out[1] | 4 << 16, "func_count"),
        (arg0, out[arg0] | 1 << 40, "reserved"),
        (arg0, out[arg0] | 8 << 36, "reserved"),
        (arg0, (out[arg0] & !0xFF) | 7, "kind"),
        (arg0, (out[arg0] & !(0xF << 32)) | 6 << 32, "ndims"),
    ] {
        let mut w = out;
        w[at] = word;
        match parse_chain(&w[..len]) {
            Err(ArgsChainError::BadField { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{field}: {other:?}"),
        }
    }
    // Random words never panic the parser or the record expansion.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..2000 {
        let w: Vec<u64> = (0..16)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            })
            .collect();
        for c in chains(&w).flatten() {
            let _ = c.records().count();
        }
    }
}

#[test]
fn a_buffer_of_chains_reads_back_in_order_and_stops_at_the_first_bad_one() {
    let mut buf = Vec::new();
    let mut out = [0u64; 64];
    let mut all = Vec::new();
    for task in 0..5u64 {
        let mut t = tensor(0, 1);
        t.task_id = task;
        let s = ArgsDumpRecord { task_id: task, ..scalar(1, task) };
        let len = encode(&[t, s], &mut out).unwrap();
        buf.extend_from_slice(&out[..len]);
        all.extend([t, s]);
    }
    let got: Vec<_> = chains(&buf).flat_map(|c| c.unwrap().records().collect::<Vec<_>>()).collect();
    assert_eq!(got, all);
    // Corrupt the third chain's first argument: two chains, then the error, then nothing.
    let third = 2 * (ARGS_CHAIN_HEADER_WORDS + 4 + 2) + ARGS_CHAIN_HEADER_WORDS;
    buf[third] |= 1 << 40;
    let r: Vec<_> = chains(&buf).collect();
    assert_eq!(r.len(), 3);
    assert!(r[..2].iter().all(Result::is_ok) && r[2].is_err());
}

fn arb_record() -> impl Strategy<Value = ArgsDumpRecord> {
    (
        any::<bool>(),
        0..=ARGS_MAX_DIMS as u8,
        any::<[u32; 2 * ARGS_MAX_DIMS]>(),
        (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>()),
        (0u8..4, any::<u8>(), any::<u8>(), any::<bool>(), any::<bool>(), any::<u16>()),
    )
        .prop_map(
            |(is_scalar, nd, dims, (off, size, value, start), (role, dtype, flags, tr, co, ix))| {
                let mut r = ArgsDumpRecord {
                    task_id: 99,
                    stage: ARG_STAGE_AFTER_COMPLETION,
                    func_ids: [1, 2, 3],
                    func_count: 3,
                    role,
                    dtype,
                    flags,
                    truncated: u8::from(tr),
                    is_contiguous: u8::from(co),
                    arg_index: u32::from(ix),
                    ..Default::default()
                };
                if is_scalar {
                    r.kind = ARG_KIND_SCALAR;
                    r.scalar_value = value;
                } else {
                    r.kind = ARG_KIND_TENSOR;
                    r.ndims = nd;
                    r.payload_offset = off;
                    r.payload_size = size;
                    r.start_offset = start;
                    let n = usize::from(nd);
                    r.shapes[..n].copy_from_slice(&dims[..n]);
                    r.strides[..n].copy_from_slice(&dims[ARGS_MAX_DIMS..ARGS_MAX_DIMS + n]);
                }
                r
            },
        )
}

proptest! {
    #[test]
    fn any_representable_stage_round_trips(recs in proptest::collection::vec(arb_record(), 1..40)) {
        let mut out = std::vec![0u64; ARGS_CHAIN_HEADER_WORDS + recs.len() * ARGS_ARG_MAX_WORDS];
        let len = encode(&recs, &mut out).unwrap();
        prop_assert_eq!(decode(&out[..len]), recs);
    }
}

/// The typed argument a device writer builds for `r` (what `push` derives after its checks).
fn chain_arg<'a>(r: &ArgsDumpRecord, dims: &'a mut [(u32, u32); 5]) -> ChainArg<'a> {
    let nd = usize::from(r.ndims);
    for (d, (&s, &t)) in dims.iter_mut().zip(r.shapes.iter().zip(&r.strides)) {
        *d = (s, t);
    }
    let body = if r.kind == ARG_KIND_SCALAR {
        ArgBody::Scalar(r.scalar_value)
    } else {
        ArgBody::Tensor {
            payload_offset: r.payload_offset,
            payload_size: r.payload_size,
            dims: &dims[..nd],
            start_offset: r.start_offset,
        }
    };
    ChainArg {
        role: r.role,
        dtype: r.dtype,
        flags: r.flags,
        arg_index: u16::try_from(r.arg_index).unwrap(),
        truncated: r.truncated != 0,
        contiguous: r.is_contiguous != 0,
        body,
    }
}

proptest! {
    #[test]
    fn the_typed_encoder_writes_the_records_words(
        recs in proptest::collection::vec(arb_record(), 1..40)
    ) {
        let n = ARGS_CHAIN_HEADER_WORDS + recs.len() * ARGS_ARG_MAX_WORDS;
        let (mut a, mut b, mut c) = (std::vec![0u64; n], std::vec![0u64; n], std::vec![0u64; n]);
        let la = encode(&recs, &mut a).unwrap();
        let head = ArgsChainHead::of(&recs[0]);
        let mut lb = start(&mut b, &head).unwrap();
        // The one-pass encoding: every argument's words, then the header with the count.
        let mut lc = ARGS_CHAIN_HEADER_WORDS;
        for r in &recs {
            let mut dims = [(0, 0); 5];
            let arg = chain_arg(r, &mut dims);
            prop_assert_eq!(arg.words(), arg_words(r));
            prop_assert_eq!(arg.payload_size(), if r.kind == ARG_KIND_SCALAR { 0 } else { r.payload_size });
            lb = push_arg(&mut b, lb, &arg).unwrap();
            lc += put_arg(&mut c[lc..], &arg).unwrap();
        }
        c[..ARGS_CHAIN_HEADER_WORDS].copy_from_slice(&header(&head, recs.len()).unwrap());
        prop_assert_eq!(&a[..la], &b[..lb]);
        prop_assert_eq!(&b[..lb], &c[..lc]);
        prop_assert_eq!(decode(&b[..lb]), recs);
    }
}

/// An input tensor argument of `dims`, with a payload of `payload_size` bytes at offset 0.
fn input_arg(dims: &[(u32, u32)], payload_size: u64, start_offset: u64) -> ChainArg<'_> {
    ChainArg {
        role: ARG_ROLE_INPUT,
        dtype: 2,
        flags: 0,
        arg_index: 0,
        truncated: false,
        contiguous: true,
        body: ArgBody::Tensor { payload_offset: 0, payload_size, dims, start_offset },
    }
}

#[test]
fn the_typed_encoder_checks_room_count_and_dimensions() {
    let dims = [(4, 1); 6];
    let t = |nd: usize| input_arg(&dims[..nd], 16, 0);
    let mut out = [0u64; 16];
    let len = start(&mut out, &ArgsChainHead::of(&tensor(0, 1))).unwrap();
    assert_eq!(push_arg(&mut out, 2, &t(1)), Err(ArgsChainError::Truncated { need: 3, have: 2 }));
    assert_eq!(
        push_arg(&mut out, len, &t(6)),
        Err(ArgsChainError::BadField { field: "ndims", value: 6 })
    );
    let before = out;
    assert_eq!(push_arg(&mut out[..8], len, &t(3)), Err(ArgsChainError::Full { need: 9, have: 8 }));
    assert_eq!(out, before, "a refused argument leaves the chain as it was");
    // A chain that already counts 255 arguments takes no more.
    out[1] |= COUNT_BITS;
    assert_eq!(push_arg(&mut out, len, &t(1)), Err(ArgsChainError::TooManyArgs));
    out[1] &= !COUNT_BITS;
    let len = push_arg(&mut out, len, &t(1)).unwrap();
    let (c, used) = parse_chain(&out[..len]).unwrap();
    assert_eq!((c.arg_count(), used), (1, len));
    let r = c.records().next().unwrap();
    assert_eq!((r.ndims, r.shapes[0], r.strides[0], r.payload_size), (1, 4, 1, 16));
}

#[test]
fn the_one_pass_encoder_checks_room_dimensions_count_and_functions() {
    let dims = [(4, 1); 6];
    let t = |nd: usize| input_arg(&dims[..nd], 0, 7);
    let mut out = [0u64; 8];
    assert_eq!(
        put_arg(&mut out, &t(6)),
        Err(ArgsChainError::BadField { field: "ndims", value: 6 })
    );
    assert_eq!(put_arg(&mut out[..5], &t(2)), Err(ArgsChainError::Full { need: 6, have: 5 }));
    assert_eq!(out, [0; 8], "a refused argument writes nothing");
    assert_eq!(put_arg(&mut out, &t(2)), Ok(6));
    let head = ArgsChainHead::of(&tensor(0, 1));
    assert_eq!(header(&head, 256), Err(ArgsChainError::TooManyArgs));
    let [w0, w1, w2] = header(&head, 255).unwrap();
    let mut started = [0u64; 3];
    start(&mut started, &head).unwrap();
    assert_eq!([w0, w1 & !COUNT_BITS, w2], started);
    assert_eq!((w1 & COUNT_BITS) >> 8, 255);
    let four = ArgsChainHead { func_count: 4, ..head };
    assert_eq!(header(&four, 1), Err(ArgsChainError::BadField { field: "func_count", value: 4 }));
}
