extern crate std;
use super::*;
use crate::launch::AbiRecord;
use std::vec::Vec;

/// A minimal ELF64 with one PT_NOTE holding a GNU build-id note.
fn elf_with_build_id(id: &[u8]) -> Vec<u8> {
    let mut b = std::vec![0u8; 64 + 56];
    b[..4].copy_from_slice(b"\x7fELF");
    b[4] = 2;
    b[5] = 1;
    b[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
    b[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
    b[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
    let note_off = b.len() as u64;
    let mut note = Vec::new();
    note.extend_from_slice(&4u32.to_le_bytes());
    note.extend_from_slice(&(id.len() as u32).to_le_bytes());
    note.extend_from_slice(&3u32.to_le_bytes());
    note.extend_from_slice(b"GNU\0");
    note.extend_from_slice(id);
    while note.len() % 4 != 0 {
        note.push(0);
    }
    b[64..68].copy_from_slice(&4u32.to_le_bytes());
    b[64 + 8..64 + 16].copy_from_slice(&note_off.to_le_bytes());
    b[64 + 32..64 + 40].copy_from_slice(&(note.len() as u64).to_le_bytes());
    b.extend_from_slice(&note);
    b
}

#[test]
fn fingerprint_reads_build_id_or_falls_back() {
    let id = [1u8, 2, 3, 4, 5, 6, 7, 8, 9, 10];
    let elf = elf_with_build_id(&id);
    assert_eq!(fingerprint(&elf), u64::from_le_bytes(id[..8].try_into().unwrap()));
    let other = elf_with_build_id(&[9u8; 20]);
    assert_ne!(fingerprint(&elf), fingerprint(&other));
    // Too-short build id, truncated ELF, non-ELF: FNV fallback.
    let short = elf_with_build_id(&[1, 2, 3]);
    assert_eq!(fingerprint(&short), fnv1a_64(&short));
    assert_eq!(fingerprint(&elf[..70]), fnv1a_64(&elf[..70]));
    assert_eq!(fingerprint(b"hello"), fnv1a_64(b"hello"));
    // Known FNV-1a-64 vector.
    assert_eq!(fnv1a_64(b"a"), 0xaf63_dc4c_8601_ec8c);
}

#[test]
fn names_and_records() {
    let mut buf = [0u8; 48];
    assert_eq!(
        inner_so_name(u64::MAX, u64::MAX, &mut buf),
        Some("inner_ffffffffffffffff_18446744073709551615.so")
    );
    let mut small = [0u8; 8];
    assert_eq!(inner_so_name(1, 0, &mut small), None);
    let r = ProgramReport::new("device-orchestrated", 42).unwrap();
    assert_eq!(r.name(), Ok("device-orchestrated"));
    assert_eq!(ProgramReport::from_bytes(r.as_bytes()), Ok(r));
    assert_eq!(r.last_exec_args(), None);
    assert!(ProgramReport::new(&"x".repeat(48), 0).is_err());
    let k = AicpuKernelCall { len: 10, block_idx: 2, block_dim: 3, ..Default::default() };
    assert_eq!(k.block_range(), (8, 10));
    assert_eq!(AicpuKernelCall { len: 5, ..Default::default() }.block_range(), (0, 5));
}
