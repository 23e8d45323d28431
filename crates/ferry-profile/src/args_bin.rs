//! [`ArgsBin`]: the payloads of `args.bin`, held in memory (a run's collection) or read on
//! demand from the file (a profile opened for analysis: never copied whole).
use std::borrow::Cow;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

/// `args.bin`: the payloads of an argument dump, addressed by
/// [`DumpedArg::bin_offset`](super::DumpedArg::bin_offset).
///
/// A run's collection appends payloads in memory ([`ArgsBin::extend_from_slice`]); a profile
/// opened for analysis keeps the file and reads one payload at a time
/// ([`ArgsBin::from_file`], [`ArgsBin::read`]), so a payload file of gigabytes costs memory
/// only for the payloads looked at.
///
/// # Examples
/// ```
/// use ferry_profile::ArgsBin;
/// let mut b = ArgsBin::default();
/// b.extend_from_slice(b"abcdef");
/// assert_eq!(b.len(), 6);
/// assert_eq!(&*b.read(2, 3).unwrap().unwrap(), b"cde");
/// assert!(b.read(4, 3).unwrap().is_none()); // past the end
/// ```
#[derive(Clone, Debug, Default)]
pub struct ArgsBin {
    mem: Vec<u8>,
    /// The file and the size it had when checked (reads stay below it).
    file: Option<(Arc<File>, u64)>,
}

impl ArgsBin {
    /// The payloads of the file `file`, of which `len` bytes (its checked size) are read on
    /// demand.
    pub fn from_file(file: File, len: u64) -> ArgsBin {
        ArgsBin { mem: Vec::new(), file: Some((Arc::new(file), len)) }
    }

    /// Payloads held in memory.
    pub fn from_vec(bytes: Vec<u8>) -> ArgsBin {
        ArgsBin { mem: bytes, file: None }
    }

    /// Its size in bytes.
    pub fn len(&self) -> u64 {
        match &self.file {
            Some((_, len)) => *len,
            None => self.mem.len() as u64,
        }
    }

    /// Whether it holds no byte.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends `bytes` (in memory; a file-backed one is first read into memory).
    ///
    /// # Panics
    /// When a file-backed one cannot be read back.
    pub fn extend_from_slice(&mut self, bytes: &[u8]) {
        if self.file.is_some() {
            let all = self.read(0, self.len()).expect("args.bin read back").unwrap_or_default();
            *self = ArgsBin::from_vec(all.into_owned());
        }
        self.mem.extend_from_slice(bytes);
    }

    /// Reserves room for `additional` more bytes in memory.
    pub fn reserve(&mut self, additional: usize) {
        self.mem.reserve(additional);
    }

    /// The `len` bytes at `offset`; `None` when they are not all inside it.
    ///
    /// # Errors
    /// Reading the file.
    pub fn read(&self, offset: u64, len: u64) -> io::Result<Option<Cow<'_, [u8]>>> {
        let Some(end) = offset.checked_add(len).filter(|&e| e <= self.len()) else {
            return Ok(None);
        };
        match &self.file {
            None => Ok(self.mem.get(offset as usize..end as usize).map(Cow::Borrowed)),
            Some((f, _)) => {
                let mut buf = vec![0u8; len as usize];
                f.read_exact_at(&mut buf, offset)?;
                Ok(Some(Cow::Owned(buf)))
            }
        }
    }

    /// Writes all of it to `w`, a bounded chunk at a time from a file.
    ///
    /// # Errors
    /// Reading the file or writing `w`.
    pub fn write_to(&self, w: &mut impl Write) -> io::Result<()> {
        let Some((f, len)) = &self.file else { return w.write_all(&self.mem) };
        let mut buf = vec![0u8; 1 << 20];
        let mut off = 0u64;
        while off < *len {
            let n = (*len - off).min(buf.len() as u64) as usize;
            f.read_exact_at(&mut buf[..n], off)?;
            w.write_all(&buf[..n])?;
            off += n as u64;
        }
        Ok(())
    }
}

impl PartialEq for ArgsBin {
    /// Equal content (a file-backed one is read for the comparison).
    fn eq(&self, other: &ArgsBin) -> bool {
        if self.len() != other.len() {
            return false;
        }
        match (self.read(0, self.len()), other.read(0, other.len())) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for ArgsBin {}

impl From<Vec<u8>> for ArgsBin {
    fn from(v: Vec<u8>) -> ArgsBin {
        ArgsBin::from_vec(v)
    }
}
