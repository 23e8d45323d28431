extern crate std;

use super::*;
use crate::launch::AbiRecord;
use proptest::prelude::*;
use std::vec;
use std::vec::Vec;

#[test]
fn buffer_sizes_match_the_original() {
    assert_eq!(AicpuTaskRecord::buffer_size(1000), 32064);
    assert_eq!(AicoreTaskRecord::buffer_size(1024), 32832);
    assert_eq!(SchedPhaseRecord::buffer_size(16384), 1048640);
    assert_eq!(OrchPhaseRecord::buffer_size(16384), 524352);
    assert_eq!(PmuRecord::buffer_size(512), 32832);
    assert_eq!(ScopeStatsRecord::buffer_size(512), 41024);
    assert_eq!(ArgsDumpRecord::buffer_size(256), 32832);
}

#[test]
fn validation_rejects_out_of_range_fields() {
    let s = SchedPhaseRecord { kind: 3, ..Default::default() };
    assert!(matches!(s.validate(), Err(RecordDecodeError::BadField { field: "kind", .. })));
    let a = ArgsDumpRecord { ndims: 6, ..Default::default() };
    assert!(matches!(a.validate(), Err(RecordDecodeError::BadField { field: "ndims", .. })));
    let p = PmuRecord { core_type: 2, ..Default::default() };
    assert!(p.validate().is_err());
    let mut sc = ScopeStatsRecord { phase: 2, ..Default::default() };
    assert!(sc.validate().is_err());
    sc.phase = SCOPE_PHASE_END;
    sc.set_site_file("orchestration_kernel_with_a_long_name.cpp");
    assert_eq!(sc.site_file().map(str::len), Some(31));
    assert_eq!(sc.validate(), Ok(()));
}

#[test]
fn count_over_capacity_is_rejected() {
    let mut buf = [0u8; 256]; // 64 + align_up(2 × 80, 64)
    buf[..4].copy_from_slice(&3u32.to_le_bytes());
    assert_eq!(
        decode_buffer::<ScopeStatsRecord>(&buf, 2).err(),
        Some(RecordDecodeError::CountOverCapacity {
            record: "ScopeStatsRecord",
            count: 3,
            capacity: 2
        })
    );
    assert!(decode_buffer::<ScopeStatsRecord>(&buf, usize::MAX).is_err());
}

fn fuzz<R: DeviceRecord>(bytes: &[u8], cap: usize) {
    match decode_buffer::<R>(bytes, cap) {
        Ok(view) => {
            assert!(view.count() <= cap);
            assert_eq!(view.records().count(), view.count());
            for r in view.records().flatten() {
                assert_eq!(r.validate(), Ok(()));
            }
        }
        Err(e) => {
            let _ = e; // typed error, no panic
        }
    }
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..1200),
        cap in 0usize..40,
        count in proptest::option::of(0u32..48),
    ) {
        let mut bytes = bytes;
        // Optionally plant a plausible count so decoding gets past the header often.
        if let Some(c) = count {
            for placement_at in [0usize, 32 * cap, 64 * cap, 128 * cap] {
                if placement_at + 4 <= bytes.len() {
                    bytes[placement_at..placement_at + 4].copy_from_slice(&c.to_le_bytes());
                }
            }
        }
        fuzz::<AicpuTaskRecord>(&bytes, cap);
        fuzz::<AicoreTaskRecord>(&bytes, cap);
        fuzz::<SchedPhaseRecord>(&bytes, cap);
        fuzz::<OrchPhaseRecord>(&bytes, cap);
        fuzz::<PmuRecord>(&bytes, cap);
        fuzz::<ScopeStatsRecord>(&bytes, cap);
        fuzz::<ArgsDumpRecord>(&bytes, cap);
    }

    #[test]
    fn records_round_trip_through_a_buffer(
        recs in proptest::collection::vec((any::<u64>(), any::<u64>(), any::<u64>(), any::<u32>(), any::<u32>()), 0..8),
    ) {
        let cap = 8;
        let mut buf = vec![0u8; AicoreTaskRecord::buffer_size(cap)];
        let recs: Vec<AicoreTaskRecord> = recs.into_iter().map(|(a, b, c, d, e)| AicoreTaskRecord {
            start_time: a, end_time: b, task_token_raw: c, reg_task_id: d, receive_to_start_cycles: e,
        }).collect();
        for (i, r) in recs.iter().enumerate() {
            buf[i * 32..(i + 1) * 32].copy_from_slice(r.as_bytes());
        }
        let at = AicoreTaskRecord::PLACEMENT.count_offset(32, cap);
        buf[at..at + 4].copy_from_slice(&(recs.len() as u32).to_le_bytes());
        let view = decode_buffer::<AicoreTaskRecord>(&buf, cap).unwrap();
        let back: Vec<_> = view.records().map(Result::unwrap).collect();
        prop_assert_eq!(back, recs);
    }
}
