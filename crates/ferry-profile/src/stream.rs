//! Helpers the streaming writers share: progress ticks, JSON arrays serialized straight from the
//! model's slices, allocation-free integer formatting for the CSV, and the inline lists the trace
//! plan keeps per slice.

use std::cell::Cell;
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::ser::{Serialize, SerializeSeq, Serializer};

use super::write::{WritePhase, WriteProgress};

/// Items (records, trace events) between two progress reports inside one file.
pub(crate) const PROGRESS_CHUNK: u64 = 8192;

/// Counts the items a phase has written and reports to the caller's callback at each file's
/// start and every [`PROGRESS_CHUNK`] items. Without a callback a tick is one add and one compare.
///
/// Tickers of threads that write one phase together share a count ([`Ticker::shared`]): each
/// keeps its own (for the records of the files it wrote) and reports the phase's.
pub(crate) struct Ticker<'a> {
    cb: Option<&'a dyn Fn(WriteProgress)>,
    phase: WritePhase,
    total: u64,
    done: Cell<u64>,
    next: Cell<u64>,
    file: Cell<&'static str>,
    shared: Option<&'a AtomicU64>,
}

impl<'a> Ticker<'a> {
    /// A ticker that reports to `cb` (if any) out of `total` items.
    pub(crate) fn new(
        cb: Option<&'a dyn Fn(WriteProgress)>,
        phase: WritePhase,
        total: u64,
    ) -> Self {
        let next = if cb.is_some() { PROGRESS_CHUNK } else { u64::MAX };
        Self {
            cb,
            phase,
            total,
            done: Cell::new(0),
            next: Cell::new(next),
            file: Cell::new(""),
            shared: None,
        }
    }

    /// As [`Ticker::new`], also counting into `phase_done`, which it reports: the items every
    /// ticker sharing it has counted.
    pub(crate) fn shared(
        cb: Option<&'a dyn Fn(WriteProgress)>,
        phase: WritePhase,
        total: u64,
        phase_done: &'a AtomicU64,
    ) -> Self {
        Self { shared: Some(phase_done), ..Self::new(cb, phase, total) }
    }

    /// A ticker that reports nothing (the single-file writers).
    pub(crate) fn silent() -> Ticker<'static> {
        Ticker::new(None, WritePhase::Files, 0)
    }

    /// Items this ticker counted so far.
    pub(crate) fn done(&self) -> u64 {
        self.done.get()
    }

    /// Starts file `name` (reported at once).
    pub(crate) fn start_file(&self, name: &'static str) {
        self.file.set(name);
        self.report();
    }

    /// Counts `n` more items.
    #[inline]
    pub(crate) fn tick(&self, n: u64) {
        let d = self.done.get() + n;
        self.done.set(d);
        if let Some(s) = self.shared {
            // Relaxed: a progress count; the threads' joins order the final value.
            s.fetch_add(n, Ordering::Relaxed);
        }
        if d >= self.next.get() {
            self.next.set(d - d % PROGRESS_CHUNK + PROGRESS_CHUNK);
            self.report();
        }
    }

    /// Reports the current state (also at the end of a phase).
    pub(crate) fn report(&self) {
        if let Some(cb) = self.cb {
            // Relaxed: as in `tick`.
            let done = self.shared.map_or(self.done.get(), |s| s.load(Ordering::Relaxed));
            cb(WriteProgress { phase: self.phase, file: self.file.get(), done, total: self.total });
        }
    }
}

/// Hashes integer keys (task ids, `(core, dispatch)` pairs) with a rotate, xor and multiply per
/// word, as rustc's FxHash does: the keys come from the device, not from an adversary, and
/// SipHash made the joins' lookups the largest cost of planning a 50,000-task trace.
///
/// Not for keys an adversary chooses (no DoS resistance).
///
/// # Examples
/// ```
/// use ferry_profile::{IdMap, IdSet};
/// let mut m: IdMap<u64, &str> = IdMap::default();
/// m.insert(7, "task 7");
/// let s: IdSet<(u64, u64)> = [(1, 2)].into_iter().collect();
/// assert_eq!((m[&7], s.contains(&(1, 2))), ("task 7", true));
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct IdHasher(u64);

impl IdHasher {
    const K: u64 = 0xf135_7aea_2e62_a9c5;

    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(26) ^ word).wrapping_mul(Self::K);
    }
}

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
    }

    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.add(n.into());
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        // hashbrown takes the bucket from the low bits and the tag from the top 7: fold the
        // well-mixed high half into the low one.
        self.0 ^ (self.0 >> 32)
    }
}

/// A hash map over integer keys with [`IdHasher`].
pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

/// A hash set over integer keys with [`IdHasher`].
pub type IdSet<K> = std::collections::HashSet<K, BuildHasherDefault<IdHasher>>;

/// A JSON array of `items`, each mapped through `f` and serialized as it comes (no collected
/// `Vec`), one tick per item.
#[cfg(test)]
pub(crate) struct TickSeq<'a, 't, T, F> {
    pub(crate) items: &'a [T],
    pub(crate) f: F,
    pub(crate) tick: &'a Ticker<'t>,
}

#[cfg(test)]
impl<'a, T, F, S> Serialize for TickSeq<'a, '_, T, F>
where
    F: Fn(&'a T) -> S,
    S: Serialize,
{
    fn serialize<Ser: Serializer>(&self, s: Ser) -> Result<Ser::Ok, Ser::Error> {
        let mut seq = s.serialize_seq(Some(self.items.len()))?;
        for it in self.items {
            seq.serialize_element(&(self.f)(it))?;
            self.tick.tick(1);
        }
        seq.end()
    }
}

/// The item itself (a [`TickSeq`] of the items as they are).
#[cfg(test)]
pub(crate) fn same<T>(t: &T) -> &T {
    t
}

/// `"00" "01" … "99"`: two decimal digits per table lookup.
const DIGIT_PAIRS: &[u8; 200] = b"\
    0001020304050607080910111213141516171819\
    2021222324252627282930313233343536373839\
    4041424344454647484950515253545556575859\
    6061626364656667686970717273747576777879\
    8081828384858687888990919293949596979899";

/// The decimal digits of `v`, formatted into the end of `buf` two at a time (no allocation, no
/// `core::fmt`, no UTF-8 check: the writers' hottest helper).
#[inline]
fn dec_bytes(buf: &mut [u8; 20], mut v: u64) -> &[u8] {
    let mut i = buf.len();
    while v >= 100 {
        let pair = (v % 100) as usize * 2;
        v /= 100;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    }
    if v >= 10 {
        let pair = v as usize * 2;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    } else {
        i -= 1;
        buf[i] = b'0' + v as u8;
    }
    &buf[i..]
}

/// The decimal digits of `v`, formatted into `buf` (no allocation, no `core::fmt`).
#[inline]
pub(crate) fn dec_str(buf: &mut [u8; 20], v: u64) -> &str {
    // ASCII digits are UTF-8.
    std::str::from_utf8(dec_bytes(buf, v)).unwrap_or_default()
}

/// `0x` and the 16 zero-padded lowercase hex digits of `v` (`0x%016x`), formatted into `buf`.
#[inline]
fn hex16_bytes(buf: &mut [u8; 18], v: u64) -> &[u8; 18] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    buf[0] = b'0';
    buf[1] = b'x';
    for k in 0..16 {
        buf[2 + k] = HEX[((v >> (4 * (15 - k))) & 0xf) as usize];
    }
    buf
}

/// `0x` and the 16 zero-padded lowercase hex digits of `v` (`0x%016x`), formatted into `buf`.
#[inline]
pub(crate) fn hex16_str(buf: &mut [u8; 18], v: u64) -> &str {
    // ASCII is UTF-8.
    std::str::from_utf8(hex16_bytes(buf, v)).unwrap_or_default()
}

/// Appends the decimal digits of `v`.
#[inline]
pub(crate) fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(dec_bytes(&mut [0; 20], v));
}

/// Appends the decimal digits of `v`, with a `-` when negative.
#[inline]
pub(crate) fn put_i64(out: &mut Vec<u8>, v: i64) {
    if v < 0 {
        out.push(b'-');
    }
    put_u64(out, v.unsigned_abs());
}

/// Appends `0x` and the 16 zero-padded lowercase hex digits of `v` (`0x%016x`).
#[inline]
pub(crate) fn put_hex16(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(hex16_bytes(&mut [0; 18], v));
}

/// A list that keeps up to `N` items inline and moves to the heap only beyond that: a trace
/// slice's annotations and flows (two or three items) cost no allocation each.
///
/// Derefs to a slice; equality, hashing and `Debug` are the slice's.
///
/// # Examples
/// ```
/// use ferry_profile::perfetto::InlineList;
/// let mut l: InlineList<u64, 2> = [1, 2].into();
/// l.push(3); // spills to the heap
/// assert_eq!(&l[..], &[1, 2, 3]);
/// assert_eq!(l, InlineList::<u64, 2>::from([1, 2, 3]));
/// ```
#[derive(Clone)]
pub struct InlineList<T: Copy + Default, const N: usize>(Repr<T, N>);

#[derive(Clone)]
enum Repr<T, const N: usize> {
    /// The first `len` items are the list.
    Inline { len: u8, items: [T; N] },
    /// More than `N` items.
    Heap(Vec<T>),
}

impl<T: Copy + Default, const N: usize> InlineList<T, N> {
    const FITS: () = assert!(N <= u8::MAX as usize, "an inline length is a u8");

    /// An empty list.
    pub fn new() -> Self {
        let () = Self::FITS;
        Self(Repr::Inline { len: 0, items: [T::default(); N] })
    }

    /// Appends `v`.
    pub fn push(&mut self, v: T) {
        match &mut self.0 {
            Repr::Inline { len, items } if usize::from(*len) < N => {
                items[usize::from(*len)] = v;
                *len += 1;
            }
            Repr::Inline { items, .. } => {
                let mut heap = Vec::with_capacity(2 * N.max(1));
                heap.extend_from_slice(items);
                heap.push(v);
                self.0 = Repr::Heap(heap);
            }
            Repr::Heap(heap) => heap.push(v),
        }
    }
}

impl<T: Copy + Default, const N: usize> InlineList<T, N> {
    /// Removes every item (a heap list goes back inline).
    pub fn clear(&mut self) {
        *self = Self::new();
    }
}

impl<T: Copy + Default + Serialize, const N: usize> Serialize for InlineList<T, N> {
    /// As a sequence, like a `Vec`.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.len()))?;
        for v in self.iter() {
            seq.serialize_element(v)?;
        }
        seq.end()
    }
}

impl<'de, T: Copy + Default + serde::Deserialize<'de>, const N: usize> serde::Deserialize<'de>
    for InlineList<T, N>
{
    /// From a sequence, like a `Vec`.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Items<T, const N: usize>(std::marker::PhantomData<T>);
        impl<'de, T: Copy + Default + serde::Deserialize<'de>, const N: usize>
            serde::de::Visitor<'de> for Items<T, N>
        {
            type Value = InlineList<T, N>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a sequence")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Self::Value, A::Error> {
                let mut l = InlineList::new();
                while let Some(v) = a.next_element()? {
                    l.push(v);
                }
                Ok(l)
            }
        }
        d.deserialize_seq(Items::<T, N>(std::marker::PhantomData))
    }
}

impl<T: Copy + Default, const N: usize> Default for InlineList<T, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy + Default, const N: usize> Deref for InlineList<T, N> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match &self.0 {
            Repr::Inline { len, items } => &items[..usize::from(*len)],
            Repr::Heap(heap) => heap,
        }
    }
}

impl<T: Copy + Default, const N: usize, const K: usize> From<[T; K]> for InlineList<T, N> {
    fn from(items: [T; K]) -> Self {
        items.into_iter().collect()
    }
}

impl<T: Copy + Default, const N: usize> FromIterator<T> for InlineList<T, N> {
    /// Fills the inline array directly (no per-item branch on the representation: the model's
    /// rows build three of these per argument), spilling to the heap past `N` items.
    #[inline]
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let () = Self::FITS;
        let mut it = iter.into_iter();
        let mut items = [T::default(); N];
        for (len, slot) in items.iter_mut().enumerate() {
            match it.next() {
                Some(v) => *slot = v,
                // `len < N ≤ u8::MAX` (`FITS`, checked at compile time below).
                None => return Self(Repr::Inline { len: len as u8, items }),
            }
        }
        match it.next() {
            None => Self(Repr::Inline { len: N as u8, items }),
            Some(v) => {
                let mut heap = Vec::with_capacity(2 * N.max(1));
                heap.extend_from_slice(&items);
                heap.push(v);
                heap.extend(it);
                Self(Repr::Heap(heap))
            }
        }
    }
}

impl<'a, T: Copy + Default, const N: usize> IntoIterator for &'a InlineList<T, N> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<T: Copy + Default + PartialEq, const N: usize> PartialEq for InlineList<T, N> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl<T: Copy + Default + Eq, const N: usize> Eq for InlineList<T, N> {}

impl<T: Copy + Default + fmt::Debug, const N: usize> fmt::Debug for InlineList<T, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #[test]
        fn integers_format_like_std(u in proptest::num::u64::ANY, i in proptest::num::i64::ANY) {
            let mut out = Vec::new();
            put_u64(&mut out, u);
            out.push(b',');
            put_i64(&mut out, i);
            out.push(b',');
            put_hex16(&mut out, u);
            proptest::prop_assert_eq!(String::from_utf8(out).unwrap(), format!("{u},{i},0x{u:016x}"));
        }
    }

    proptest::proptest! {
        #[test]
        fn inline_lists_hold_what_was_pushed(v in proptest::collection::vec(0u64..100, 0..9)) {
            let mut l: InlineList<u64, 2> = InlineList::new();
            for &x in &v {
                l.push(x);
            }
            proptest::prop_assert_eq!(&l[..], &v[..]);
            proptest::prop_assert_eq!(l, v.iter().copied().collect::<InlineList<u64, 2>>());
        }
    }

    #[test]
    fn integer_edges_format_like_std() {
        for (u, i) in [(0, 0), (9, -1), (10, i64::MIN), (u64::MAX, i64::MAX)] {
            let mut out = Vec::new();
            put_u64(&mut out, u);
            out.push(b' ');
            put_i64(&mut out, i);
            assert_eq!(String::from_utf8(out).unwrap(), format!("{u} {i}"));
        }
        // Every digit count, at and around each power of ten (the pair loop's odd/even ends).
        let mut p = 1u64;
        for _ in 0..20 {
            for u in [p - 1, p, p + 1, p.saturating_mul(10) - 1] {
                let mut out = Vec::new();
                put_u64(&mut out, u);
                assert_eq!(String::from_utf8(out).unwrap(), u.to_string());
                assert_eq!(dec_str(&mut [0; 20], u), u.to_string());
            }
            p = p.saturating_mul(10);
        }
        assert_eq!(hex16_str(&mut [0; 18], 0xab), "0x00000000000000ab");
    }

    #[test]
    fn ticks_report_per_file_and_per_chunk() {
        let seen = std::cell::RefCell::new(Vec::new());
        let cb = |p: WriteProgress| seen.borrow_mut().push((p.file, p.done));
        let t = Ticker::new(Some(&cb), WritePhase::Files, 3 * PROGRESS_CHUNK);
        t.start_file("a");
        t.tick(PROGRESS_CHUNK - 1);
        t.start_file("b");
        t.tick(2);
        t.tick(2 * PROGRESS_CHUNK);
        t.report();
        let c = PROGRESS_CHUNK;
        assert_eq!(
            *seen.borrow(),
            vec![("a", 0), ("b", c - 1), ("b", c + 1), ("b", 3 * c + 1), ("b", 3 * c + 1)]
        );
    }
}
