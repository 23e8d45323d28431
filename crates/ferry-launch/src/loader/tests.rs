use super::*;

#[test]
fn validate_elf_classifies() {
    let good = ferry_programs::KERNELS.bytes;
    assert!(validate_elf("k", good).is_ok());
    assert!(matches!(validate_elf("k", &good[..good.len() / 2]), Err(LoadError::Truncated { .. })));
    assert!(matches!(validate_elf("k", &good[..40]), Err(LoadError::Truncated { .. })));
    assert!(matches!(validate_elf("k", b"MZ\x90\x00 nope"), Err(LoadError::Corrupt { .. })));
    let mut exe = good.to_vec();
    exe[16] = 2; // ET_EXEC
    assert!(matches!(validate_elf("k", &exe), Err(LoadError::Corrupt { .. })));
    assert!(matches!(validate_elf("k", &[]), Err(LoadError::Truncated { .. })));
}
