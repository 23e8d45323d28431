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

/// Byte offsets → line and column.
#[derive(Debug)]
pub(crate) struct Lines {
    pub(crate) file: String,
    starts: Vec<usize>,
}

impl Lines {
    pub(crate) fn new(file: &str, text: &str) -> Lines {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Lines { file: file.to_string(), starts }
    }

    /// The error at byte `offset`.
    pub(crate) fn at(&self, offset: usize, message: impl Into<String>) -> WorkloadError {
        let line = self.starts.partition_point(|&s| s <= offset).max(1);
        let col = offset - self.starts[line - 1] + 1;
        WorkloadError::At { file: self.file.clone(), line, col, message: message.into() }
    }
}
