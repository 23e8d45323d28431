//! Fingerprints of program bytes: the content hash and the ELF build id that name a loaded
//! program.

/// FNV-1a-64 offset basis.
pub const FNV1A_64_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a-64 prime.
pub const FNV1A_64_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a-64 of `bytes`.
pub const fn fnv1a_64(bytes: &[u8]) -> u64 {
    let mut h = FNV1A_64_OFFSET;
    let mut i = 0;
    while i < bytes.len() {
        h ^= bytes[i] as u64;
        h = h.wrapping_mul(FNV1A_64_PRIME);
        i += 1;
    }
    h
}

/// The 64-bit identity of a program's bytes, computed independently by the host loader and by
/// the bootstrap dispatcher so that both name the file alike with no side channel.
///
/// The first 8 bytes (little-endian) of the ELF64 `NT_GNU_BUILD_ID` note found through the
/// `PT_NOTE` program headers, when the buffer is a well-formed little-endian ELF64 with such a
/// note of at least 8 bytes; otherwise FNV-1a-64 over the whole buffer.
pub fn fingerprint(bytes: &[u8]) -> u64 {
    elf_build_id_64(bytes).unwrap_or_else(|| fnv1a_64(bytes))
}

/// The first 8 bytes of the GNU build-id note of a little-endian ELF64, if it has one.
pub fn elf_build_id_64(b: &[u8]) -> Option<u64> {
    const PT_NOTE: u32 = 4;
    const NT_GNU_BUILD_ID: u32 = 3;
    let u16_at = |o: usize| Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?));
    if b.get(..4)? != b"\x7fELF" || *b.get(4)? != 2 || *b.get(5)? != 1 {
        return None;
    }
    let phoff = usize::try_from(u64_at(0x20)?).ok()?;
    let phentsize = usize::from(u16_at(0x36)?);
    let phnum = usize::from(u16_at(0x38)?);
    if phentsize < 56 {
        return None;
    }
    for i in 0..phnum {
        let ph = phoff.checked_add(i.checked_mul(phentsize)?)?;
        if u32_at(ph)? != PT_NOTE {
            continue;
        }
        let off = usize::try_from(u64_at(ph + 8)?).ok()?;
        let size = usize::try_from(u64_at(ph + 32)?).ok()?;
        let end = off.checked_add(size)?;
        let mut p = off;
        while p.checked_add(12)? <= end {
            let namesz = u32_at(p)? as usize;
            let descsz = u32_at(p + 4)? as usize;
            let ty = u32_at(p + 8)?;
            let name_at = p + 12;
            let desc_at = name_at.checked_add(namesz.checked_add(3)? & !3)?;
            let next = desc_at.checked_add(descsz.checked_add(3)? & !3)?;
            if ty == NT_GNU_BUILD_ID && namesz == 4 && b.get(name_at..name_at + 4)? == b"GNU\0" {
                if descsz >= 8 {
                    return u64_at(desc_at);
                }
                return None;
            }
            p = next;
        }
    }
    None
}

/// The file name the dispatcher gives the inner program: `inner_<fp as 16 hex>_<device>.so`.
///
/// Writes into `out` and returns the used prefix as `&str`; `None` if `out` is too small
/// (48 bytes always suffice).
///
/// # Examples
///
/// ```
/// use ferry_abi::services::inner_so_name;
/// let mut buf = [0u8; 64];
/// assert_eq!(inner_so_name(0xab, 3, &mut buf), Some("inner_00000000000000ab_3.so"));
/// ```
pub fn inner_so_name(fp: u64, device_id: u64, out: &mut [u8]) -> Option<&str> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut n = 0;
    let mut push = |out: &mut [u8], c: u8| -> Option<()> {
        *out.get_mut(n)? = c;
        n += 1;
        Some(())
    };
    for &c in b"inner_" {
        push(out, c)?;
    }
    for i in (0..16).rev() {
        push(out, HEX[((fp >> (i * 4)) & 0xF) as usize])?;
    }
    push(out, b'_')?;
    let mut digits = [0u8; 20];
    let mut d = 0;
    let mut v = device_id;
    loop {
        digits[d] = b'0' + (v % 10) as u8;
        d += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    for i in (0..d).rev() {
        push(out, digits[i])?;
    }
    for &c in b".so" {
        push(out, c)?;
    }
    core::str::from_utf8(&out[..n]).ok()
}
