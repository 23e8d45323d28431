//! [`WorkloadError`]: every refusal names the file and line (and column).

/// A workload the compiler refused, or a run that did not verify.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WorkloadError {
    /// The file could not be read.
    #[error("{file}: {message}")]
    Io {
        /// The file.
        file: String,
        /// What failed.
        message: String,
    },
    /// The file is not valid TOML or does not have the workload's shape, or a value in it is
    /// refused; `line` and `col` are 1-based.
    #[error("{file}:{line}:{col}: {message}")]
    At {
        /// The file.
        file: String,
        /// Line.
        line: usize,
        /// Column.
        col: usize,
        /// What is wrong.
        message: String,
    },
}

impl WorkloadError {
    /// The line, for errors that have one.
    pub fn line(&self) -> Option<usize> {
        match self {
            WorkloadError::At { line, .. } => Some(*line),
            WorkloadError::Io { .. } => None,
        }
    }

    /// The message without the position.
    pub fn message(&self) -> &str {
        match self {
            WorkloadError::At { message, .. } | WorkloadError::Io { message, .. } => message,
        }
    }
}

/// The most characters of a value a message echoes; a longer one is cut, with `…`.
pub(crate) const MAX_ECHO_CHARS: usize = 100;

/// `message` with every quoted value (between `"…"` or `` `…` ``) cut to [`MAX_ECHO_CHARS`]
/// characters, and the whole message to a few of them: a hostile file's 10,000-character name
/// is echoed as its first hundred characters.
pub(crate) fn clip_echoes(message: &str) -> String {
    let mut out = String::with_capacity(message.len().min(4 * MAX_ECHO_CHARS));
    let mut quoted: Option<(char, usize)> = None;
    for c in message.chars() {
        match quoted {
            Some((q, _)) if c == q => {
                quoted = None;
                out.push(c);
            }
            Some((q, n)) => {
                if n < MAX_ECHO_CHARS {
                    out.push(c);
                } else if n == MAX_ECHO_CHARS {
                    out.push('…');
                }
                quoted = Some((q, n + 1));
            }
            None => {
                if c == '"' || c == '`' {
                    quoted = Some((c, 0));
                }
                out.push(c);
            }
        }
    }
    // A message of unquoted text past a few echoes' length: cut too.
    let max = 6 * MAX_ECHO_CHARS;
    match out.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &out[..i]),
        None => out,
    }
}

/// Byte offsets → line and column (the column counts characters, not bytes).
#[derive(Debug)]
pub(crate) struct Lines {
    pub(crate) file: String,
    text: String,
    starts: Vec<usize>,
}

impl Lines {
    pub(crate) fn new(file: &str, text: &str) -> Lines {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Lines { file: file.to_string(), text: text.to_string(), starts }
    }

    /// The error at byte `offset`, its message's echoed values cut ([`clip_echoes`]).
    pub(crate) fn at(&self, offset: usize, message: impl Into<String>) -> WorkloadError {
        let offset = offset.min(self.text.len());
        let line = self.starts.partition_point(|&s| s <= offset).max(1);
        let start = self.starts[line - 1];
        // Characters before the offset on its line (an offset inside a character counts it).
        let col = self.text.get(start..offset).map_or_else(
            || self.text[start..].char_indices().take_while(|(i, _)| start + i < offset).count(),
            |s| s.chars().count(),
        ) + 1;
        let message = clip_echoes(&message.into());
        WorkloadError::At { file: self.file.clone(), line, col, message }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_count_characters_and_echoes_are_cut() {
        let l = Lines::new("w.toml", "a = 1\nnäme = \"ü\"\n");
        // `=` after `näme ` is the 6th character but the 7th byte of its line.
        let off = "a = 1\nnäme ".len();
        match l.at(off, "x") {
            WorkloadError::At { line, col, .. } => assert_eq!((line, col), (2, 6)),
            e => panic!("{e:?}"),
        }
        let long = format!("unknown kernel `{}` here", "k".repeat(10_000));
        let cut = clip_echoes(&long);
        assert!(cut.chars().count() < 140, "{cut}");
        assert!(cut.starts_with("unknown kernel `kkk") && cut.ends_with("…` here"), "{cut}");
        assert_eq!(clip_echoes("short `x` and \"y\""), "short `x` and \"y\"");
        assert!(clip_echoes(&"z".repeat(5_000)).chars().count() <= 6 * MAX_ECHO_CHARS + 1);
    }
}
