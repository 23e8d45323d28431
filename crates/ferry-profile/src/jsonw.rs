//! Compact JSON written by hand for the large files' per-record objects: the bytes
//! `serde_json::to_writer` writes for the same values (the tests compare them on random
//! records), without a serializer call and a key escape per field.
//!
//! A record's keys are fixed ASCII, so a writer emits each `,"key":` as one literal; strings go
//! through [`Json::str`], which copies a string that needs no escape in one piece and hands any
//! other to serde_json; floats use serde_json's own formatter, so they are its shortest
//! round-trip digits.
//!
//! Bytes collect in a buffer that the writer drains into the file every [`FLUSH_BYTES`].

use std::io::{self, Write};

use super::stream::{put_hex16, put_i64, put_u64, Ticker};

/// Buffered bytes after which [`Json::drain_into`] hands them to the writer.
pub(crate) const FLUSH_BYTES: usize = 64 << 10;

/// A compact-JSON byte buffer.
pub(crate) struct Json {
    buf: Vec<u8>,
}

impl Json {
    /// An empty buffer.
    pub(crate) fn new() -> Self {
        Self { buf: Vec::with_capacity(FLUSH_BYTES + 4096) }
    }

    /// Appends `b` as it is (literal JSON: punctuation, keys).
    #[inline]
    pub(crate) fn raw(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }

    /// Appends an unsigned integer.
    #[inline]
    pub(crate) fn u64(&mut self, v: u64) {
        put_u64(&mut self.buf, v);
    }

    /// Appends a signed integer.
    #[inline]
    pub(crate) fn i64(&mut self, v: i64) {
        put_i64(&mut self.buf, v);
    }

    /// Appends `true` or `false`.
    #[inline]
    pub(crate) fn bool(&mut self, v: bool) {
        self.raw(if v { b"true" } else { b"false" });
    }

    /// Appends a float as serde_json writes it (`null` when not finite).
    #[inline]
    pub(crate) fn f64(&mut self, v: f64) {
        use serde_json::ser::{CompactFormatter, Formatter};
        if v.is_finite() {
            // Writing into a Vec cannot fail.
            let _ = CompactFormatter.write_f64(&mut self.buf, v);
        } else {
            self.raw(b"null");
        }
    }

    /// Appends `s` as a JSON string, escaped as serde_json escapes it.
    #[inline]
    pub(crate) fn str(&mut self, s: &str) {
        if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
            self.buf.push(b'"');
            self.buf.extend_from_slice(s.as_bytes());
            self.buf.push(b'"');
        } else {
            // Writing a string into a Vec cannot fail.
            let _ = serde_json::to_writer(&mut self.buf, s);
        }
    }

    /// Appends an unsigned integer as a JSON string (`"42"`, the files' u64 convention).
    #[inline]
    pub(crate) fn u64_str(&mut self, v: u64) {
        self.buf.push(b'"');
        put_u64(&mut self.buf, v);
        self.buf.push(b'"');
    }

    /// Appends `"0x%016x"`.
    #[inline]
    pub(crate) fn hex16(&mut self, v: u64) {
        self.buf.push(b'"');
        put_hex16(&mut self.buf, v);
        self.buf.push(b'"');
    }

    /// Appends any serializable value through serde_json (the rare and small parts: a file's
    /// header, its loss accounting).
    ///
    /// # Errors
    /// The value's own serialization error.
    pub(crate) fn serde<T: serde::Serialize + ?Sized>(&mut self, v: &T) -> serde_json::Result<()> {
        serde_json::to_writer(&mut self.buf, v)
    }

    /// Appends a JSON array of `items`, each written by `put` (a record's small lists).
    #[inline]
    pub(crate) fn list<T>(
        &mut self,
        items: impl IntoIterator<Item = T>,
        mut put: impl FnMut(&mut Json, T),
    ) {
        self.buf.push(b'[');
        for (i, x) in items.into_iter().enumerate() {
            if i > 0 {
                self.buf.push(b',');
            }
            put(self, x);
        }
        self.buf.push(b']');
    }

    /// Appends a JSON array of integers.
    #[inline]
    pub(crate) fn u64s(&mut self, v: impl IntoIterator<Item = u64>) {
        self.list(v, Json::u64);
    }

    /// Appends a JSON array of signed integers.
    #[inline]
    pub(crate) fn i64s(&mut self, v: impl IntoIterator<Item = i64>) {
        self.list(v, Json::i64);
    }

    /// Appends a file's JSON array of records, each written by `put`, one tick per record on
    /// `tick`, handing the buffer to `w` as it fills ([`drain_into`](Self::drain_into)).
    ///
    /// # Errors
    /// The first error of `w`.
    pub(crate) fn records<W: Write, T>(
        &mut self,
        w: &mut W,
        items: impl IntoIterator<Item = T>,
        tick: &Ticker<'_>,
        mut put: impl FnMut(&mut Json, T),
    ) -> io::Result<()> {
        self.buf.push(b'[');
        for (i, x) in items.into_iter().enumerate() {
            if i > 0 {
                self.buf.push(b',');
            }
            put(self, x);
            tick.tick(1);
            self.drain_into(w)?;
        }
        self.buf.push(b']');
        Ok(())
    }

    /// Hands the buffered bytes to `w` once there are [`FLUSH_BYTES`] of them.
    ///
    /// # Errors
    /// The first error of `w`.
    #[inline]
    pub(crate) fn drain_into<W: Write>(&mut self, w: &mut W) -> io::Result<()> {
        if self.buf.len() >= FLUSH_BYTES {
            self.finish_into(w)?;
        }
        Ok(())
    }

    /// Hands every buffered byte to `w`.
    ///
    /// # Errors
    /// The first error of `w`.
    pub(crate) fn finish_into<W: Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Each piece is what serde_json writes for the same value.
        #[test]
        fn pieces_are_serde_jsons_bytes(
            s in "\\PC{0,12}|[\"\\\\\u{0}-\u{1f}a-z]{0,8}",
            u in proptest::num::u64::ANY,
            i in proptest::num::i64::ANY,
            f in proptest::num::f64::ANY,
            b in proptest::bool::ANY,
            list in proptest::collection::vec(proptest::num::u64::ANY, 0..5),
        ) {
            let mut j = Json::new();
            j.str(&s);
            j.raw(b",");
            j.u64(u);
            j.raw(b",");
            j.i64(i);
            j.raw(b",");
            j.f64(f);
            j.raw(b",");
            j.bool(b);
            j.raw(b",");
            j.hex16(u);
            j.raw(b",");
            j.u64_str(u);
            j.raw(b",");
            j.u64s(list.iter().copied());
            j.raw(b",");
            j.i64s(list.iter().map(|&x| x as i64));
            let mut got = Vec::new();
            j.finish_into(&mut got).unwrap();
            let signed: Vec<i64> = list.iter().map(|&x| x as i64).collect();
            let want = serde_json::to_string(&(
                &s, u, i, f, b, format!("0x{u:016x}"), u.to_string(), &list, &signed,
            ))
            .unwrap();
            // The tuple is an array: drop its brackets.
            prop_assert_eq!(String::from_utf8(got).unwrap(), &want[1..want.len() - 1]);
        }
    }

    #[test]
    fn drains_only_past_the_threshold() {
        let mut j = Json::new();
        let mut out = Vec::new();
        j.raw(&[b'1'; 100]);
        j.drain_into(&mut out).unwrap();
        assert!(out.is_empty());
        j.raw(&vec![b'2'; FLUSH_BYTES]);
        j.drain_into(&mut out).unwrap();
        assert_eq!(out.len(), FLUSH_BYTES + 100);
        j.raw(b"3");
        j.finish_into(&mut out).unwrap();
        assert_eq!(out.len(), FLUSH_BYTES + 101);
    }
}
