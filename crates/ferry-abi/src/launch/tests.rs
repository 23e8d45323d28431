extern crate std;

use super::*;
use std::format;
use std::string::ToString;
use std::vec::Vec;

fn round_trip<T: AbiRecord + PartialEq + fmt::Debug>(v: T) {
    let bytes = v.as_bytes();
    assert_eq!(bytes.len(), T::SIZE);
    assert_eq!(T::from_bytes(bytes), Ok(v));
    // One byte short and one byte long are both ABI size mismatches.
    let mut long: Vec<u8> = bytes.to_vec();
    long.push(0);
    for bad in [&bytes[..T::SIZE - 1], &long[..], &[][..]] {
        assert_eq!(
            T::from_bytes(bad),
            Err(DecodeError::WrongLength { record: T::NAME, expected: T::SIZE, actual: bad.len() })
        );
    }
}

fn full_kernel_args() -> KernelArgs {
    KernelArgs {
        ffts_base_addr: 3,
        dump_data_base: 4,
        chip_swimlane_data_base: 5,
        pmu_data_base: 6,
        pmu_reg_addrs: 7,
        dep_gen_data_base: 8,
        scope_stats_data_base: 9,
        chip_swimlane_aicore_rotation_table: 10,
        device_wall_data_base: 11,
        enable_profiling_flag: PROFILING_FLAG_ALL,
        force_simt_anchor: 13,
        aicore_pmu_ring_addrs: 14,
        ..KernelArgs::new(1, 2)
    }
}

#[test]
fn every_record_round_trips_and_rejects_wrong_lengths() {
    round_trip(full_kernel_args());
    round_trip(AicoreLaunchArgs::from(&full_kernel_args()));
    let mut init = InitArgs::new(9);
    init.scheduler_timeout_ms = -1;
    init.dma_workspace_addr = [0xAA, 0xBB];
    round_trip(init);
    let mut rca = RegisterCallableArgs::new(63, 0x1000, 77).unwrap();
    rca.set_device_orch_config_name("cfg").unwrap();
    round_trip(rca);
    round_trip(RegisterCallableArgs::default());
    round_trip(BootstrapBlob::new(0xdead_beef));
    let mut d = BootstrapArgs::zeroed();
    d.aicpu_so_bin = 1;
    d.inner_so_len = 2;
    round_trip(d);
}

#[test]
fn kernel_args_image_is_little_endian_at_documented_offsets() {
    let k = full_kernel_args();
    let b = k.as_bytes();
    let u64_at = |off: usize| u64::from_le_bytes(b[off..off + 8].try_into().unwrap());
    let u32_at = |off: usize| u32::from_le_bytes(b[off..off + 4].try_into().unwrap());
    assert_eq!(u64_at(0), 1);
    assert_eq!(u64_at(8), 2);
    assert_eq!(u64_at(16), 3);
    assert_eq!(u64_at(24), 4);
    assert_eq!(u64_at(72), 10);
    assert_eq!(u64_at(80), 11);
    assert_eq!(u32_at(88), PROFILING_FLAG_ALL);
    assert_eq!(u32_at(92), 13);
    assert_eq!(u64_at(96), 14);
    assert_eq!(u32_at(104), KERNEL_ARGS_ABI_VERSION);
    assert_eq!(u32_at(108), 112);
}

#[test]
fn kernel_args_stamp_detects_skew() {
    let good = KernelArgs::new(1, 2);
    assert_eq!(KernelArgs::from_bytes_checked(good.as_bytes()), Ok(good));
    assert_eq!(KernelArgs::default().check_abi(), Ok(()));

    let mut old = good;
    old.abi_version = KERNEL_ARGS_ABI_VERSION + 1;
    assert_eq!(
        KernelArgs::from_bytes_checked(old.as_bytes()),
        Err(DecodeError::VersionMismatch {
            record: "KernelArgs",
            expected: KERNEL_ARGS_ABI_VERSION,
            found: KERNEL_ARGS_ABI_VERSION + 1
        })
    );

    let mut lying = good;
    lying.abi_size = 96;
    assert_eq!(
        lying.check_abi(),
        Err(DecodeError::SizeFieldMismatch { record: "KernelArgs", expected: 112, found: 96 })
    );

    // A zeroed image (e.g. a device program that never got a payload) fails the stamp.
    assert!(matches!(
        KernelArgs::from_bytes_checked(&[0u8; 112]),
        Err(DecodeError::VersionMismatch { found: 0, .. })
    ));

    // A blob from a build with a longer layout: wrong length, and its stamp is still readable.
    let mut longer = good.as_bytes()[..104].to_vec();
    longer.extend_from_slice(&[0u8; 8]); // a field this build does not know
    longer.extend_from_slice(&7u32.to_le_bytes());
    longer.extend_from_slice(&120u32.to_le_bytes());
    assert_eq!(
        KernelArgs::from_bytes_checked(&longer),
        Err(DecodeError::WrongLength { record: "KernelArgs", expected: 112, actual: 120 })
    );
    assert_eq!(AbiStamp::peek(&longer), Some(AbiStamp { version: 7, size: 120 }));
}

#[test]
fn aicore_projection_copies_the_aicore_fields() {
    let k = full_kernel_args();
    let a = AicoreLaunchArgs::from(&k);
    assert_eq!(a.runtime_args, k.runtime_args);
    assert_eq!(a.regs, k.regs);
    assert_eq!(a.ffts_base_addr, k.ffts_base_addr);
    assert_eq!(a.chip_swimlane_aicore_rotation_table, k.chip_swimlane_aicore_rotation_table);
    assert_eq!(a.aicore_pmu_ring_addrs, k.aicore_pmu_ring_addrs);
    assert_eq!(a.enable_profiling_flag, k.enable_profiling_flag);
    assert_eq!(a.force_simt_anchor, k.force_simt_anchor);
    assert_eq!(a.check_abi(), Ok(()));
    assert_eq!(a.abi_size as usize, AicoreLaunchArgs::SIZE);
    assert!(a.profiling_enabled(PROFILING_FLAG_CHIP_SWIMLANE | PROFILING_FLAG_PMU));
    assert_eq!(AbiStamp::peek(a.as_bytes()), Some(AbiStamp { version: 1, size: 56 }));
    assert!(matches!(
        AicoreLaunchArgs::from_bytes_checked(k.as_bytes()),
        Err(DecodeError::WrongLength { expected: 56, actual: 112, .. })
    ));
}

#[test]
fn profiling_flags_are_the_documented_bits() {
    assert_eq!(
        [
            PROFILING_FLAG_DUMP_ARGS,
            PROFILING_FLAG_CHIP_SWIMLANE,
            PROFILING_FLAG_PMU,
            PROFILING_FLAG_DEP_GEN,
            PROFILING_FLAG_SCOPE_STATS
        ],
        [1, 2, 4, 8, 16]
    );
    assert_eq!(PROFILING_FLAG_ALL, 0x1F);
    let k = KernelArgs::new(0, 0);
    assert!(k.profiling_enabled(0));
    assert!(!k.profiling_enabled(PROFILING_FLAG_DUMP_ARGS));
}

#[test]
fn init_args_defaults_and_layout() {
    let i = InitArgs::default();
    assert_eq!((i.device_id, i.log_level, i.scheduler_timeout_ms), (0, 25, 0));
    assert_eq!(i.dma_workspace_addr, [0, 0]);
    let mut i = InitArgs::new(2);
    i.log_level = LOG_LEVEL_ERROR;
    i.scheduler_timeout_ms = -5;
    i.dma_workspace_addr[DMA_WORKSPACE_SDMA] = 0x55;
    let b = i.as_bytes();
    assert_eq!(&b[0..4], &2u32.to_le_bytes());
    assert_eq!(&b[4..8], &40u32.to_le_bytes());
    assert_eq!(&b[8..12], &(-5i32).to_le_bytes());
    assert_eq!(&b[12..16], &[0; 4]);
    assert_eq!(&b[16..24], &0x55u64.to_le_bytes());
    assert_eq!(
        [
            LOG_LEVEL_DEBUG,
            LOG_LEVEL_INFO,
            LOG_LEVEL_TIMING,
            LOG_LEVEL_WARN,
            LOG_LEVEL_ERROR,
            LOG_LEVEL_NUL
        ],
        [10, 20, 25, 30, 40, 60]
    );
}

#[test]
fn callable_ids_are_checked() {
    assert_eq!(RegisterCallableArgs::new(0, 0, 0).unwrap().callable_id(), Some(0));
    assert_eq!(RegisterCallableArgs::new(63, 0, 0).unwrap().callable_id(), Some(63));
    assert_eq!(
        RegisterCallableArgs::new(64, 0, 0),
        Err(EncodeError::CallableIdOutOfRange { id: 64 })
    );
    let mut r = RegisterCallableArgs::default();
    assert_eq!(r.active_callable_id, NO_CALLABLE);
    assert_eq!(r.callable_id(), None);
    r.active_callable_id = 64;
    assert_eq!(r.callable_id(), None);
    r.active_callable_id = i32::MIN;
    assert_eq!(r.callable_id(), None);
}

#[test]
fn callable_names_set_get_and_reject() {
    let mut r = RegisterCallableArgs::default();
    assert_eq!(r.device_orch_func_name(), Ok(""));
    let max = "x".repeat(63);
    r.set_device_orch_func_name(&max).unwrap();
    assert_eq!(r.device_orch_func_name(), Ok(max.as_str()));
    assert_eq!(r.device_orch_func_name[63], 0);

    // Too long: typed error, field unchanged.
    let long = "y".repeat(64);
    assert_eq!(
        r.set_device_orch_func_name(&long),
        Err(EncodeError::NameTooLong { len: 64, max: 63 })
    );
    assert_eq!(r.device_orch_func_name(), Ok(max.as_str()));
    assert_eq!(r.set_device_orch_config_name("a\0b"), Err(EncodeError::NameContainsNul { pos: 1 }));

    // A shorter name clears the tail of a longer one.
    r.set_device_orch_func_name("main").unwrap();
    assert_eq!(r.device_orch_func_name(), Ok("main"));
    assert!(r.device_orch_func_name[4..].iter().all(|&b| b == 0));

    // Corrupt fields from the other side are reported, not misread.
    r.device_orch_config_name = [b'z'; 64];
    assert_eq!(r.device_orch_config_name(), Err(DecodeError::NameUnterminated { capacity: 64 }));
    r.device_orch_config_name[0] = 0xFF;
    r.device_orch_config_name[1] = 0;
    assert_eq!(r.device_orch_config_name(), Err(DecodeError::NameNotUtf8 { valid_up_to: 0 }));

    let dbg = format!("{:?}", RegisterCallableArgs::new(1, 0x10, 2).unwrap());
    assert!(dbg.contains("device_orch_func_name: \"\""), "{dbg}");
}

#[test]
fn c_name_helpers_edge_cases() {
    let mut empty: [u8; 0] = [];
    assert_eq!(write_c_name(&mut empty, ""), Err(EncodeError::NameTooLong { len: 0, max: 0 }));
    assert_eq!(read_c_name(&empty), Err(DecodeError::NameUnterminated { capacity: 0 }));
    let mut one = [7u8; 1];
    write_c_name(&mut one, "").unwrap();
    assert_eq!(one, [0]);
    assert_eq!(read_c_name(&one), Ok(""));
}

#[test]
fn bootstrap_blob_layout_and_names() {
    let blob = BootstrapBlob::new(0x1234);
    let b = blob.as_bytes();
    assert!(b[..40].iter().all(|&x| x == 0));
    assert_eq!(&b[40..48], &0x1234u64.to_le_bytes());
    assert!(b[48..208].iter().all(|&x| x == 0));
    assert_eq!(&b[208..208 + BOOTSTRAP_KERNEL_NAME.len()], BOOTSTRAP_KERNEL_NAME.as_bytes());
    assert_eq!(&b[240..240 + BOOTSTRAP_SO_NAME.len()], BOOTSTRAP_SO_NAME.as_bytes());
    assert!(b[272..].iter().all(|&x| x == 0));
    assert_eq!((BOOTSTRAP_KERNEL_NAME_OFFSET, BOOTSTRAP_SO_NAME_OFFSET), (208, 240));
    assert_eq!(blob.kernel_name(), Ok("DynTileFwkKernelServerInit"));
    assert_eq!(blob.so_name(), Ok("libaicpu_extend_kernels.so"));
    assert_eq!(blob.op_name(), Ok(""));
    assert_eq!(BootstrapBlob::default().device_args_ptr, 0);
    assert!(format!("{blob:?}").contains("libaicpu_extend_kernels.so"));
    assert_eq!(
        DISPATCHER_EXPORTS,
        [
            "StaticTileFwkBackendKernelServer",
            "DynTileFwkBackendKernelServerInit",
            "DynTileFwkBackendKernelServer"
        ]
    );
}

#[test]
fn device_args_layout() {
    let mut d = BootstrapArgs::default();
    assert_eq!(d, BootstrapArgs::zeroed());
    d.aicpu_so_bin = 0xA;
    d.aicpu_so_len = 0xB;
    d.device_id = 0xC;
    d.inner_so_bin = 0xD;
    d.inner_so_len = 0xE;
    let b = d.as_bytes();
    assert!(b[..96].iter().all(|&x| x == 0));
    for (i, v) in [0xAu64, 0xB, 0xC, 0xD, 0xE].into_iter().enumerate() {
        let off = 96 + 8 * i;
        assert_eq!(&b[off..off + 8], &v.to_le_bytes());
    }
    assert!(b[136..].iter().all(|&x| x == 0));
}

#[test]
fn errors_display_lowercase() {
    let e = DecodeError::WrongLength { record: "KernelArgs", expected: 112, actual: 96 };
    assert_eq!(e.to_string(), "abi size mismatch for KernelArgs: expected 112 bytes, got 96");
    assert_eq!(
        EncodeError::CallableIdOutOfRange { id: 70 }.to_string(),
        "callable id 70 is outside 0..64"
    );
    for s in [
        DecodeError::VersionMismatch { record: "X", expected: 1, found: 2 }.to_string(),
        DecodeError::SizeFieldMismatch { record: "X", expected: 1, found: 2 }.to_string(),
        DecodeError::NameUnterminated { capacity: 3 }.to_string(),
        DecodeError::NameNotUtf8 { valid_up_to: 3 }.to_string(),
        EncodeError::NameTooLong { len: 3, max: 2 }.to_string(),
        EncodeError::NameContainsNul { pos: 3 }.to_string(),
    ] {
        assert!(s.starts_with(|c: char| c.is_lowercase()), "{s}");
        assert!(!s.ends_with('.'), "{s}");
    }
}
