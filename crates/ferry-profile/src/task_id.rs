//! The one task-id form every command reads: hex, as every command prints ids (`0x40`), with or
//! without the `0x` and with any leading zeros (`0x40`, `40` and `0x0000000000000040` are one
//! task).

/// A text that is not a task id.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not a task id (hex, as ferry prints ids: 0x40): {why}")]
pub struct TaskIdError {
    /// The text given.
    pub text: String,
    /// Why it does not parse.
    pub why: std::num::ParseIntError,
}

/// Parses a task id in the form ferry prints it: hex, `0x` optional, leading zeros allowed.
///
/// # Examples
/// ```
/// use ferry_profile::parse_task_id;
/// for s in ["0x40", "40", "0x0000000000000040"] {
///     assert_eq!(parse_task_id(s), Ok(0x40));
/// }
/// assert!(parse_task_id("0xg1").is_err());
/// ```
///
/// # Errors
/// [`TaskIdError`] when `s` is not a hex number that fits in 64 bits.
pub fn parse_task_id(s: &str) -> Result<u64, TaskIdError> {
    let h = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")).unwrap_or(s);
    u64::from_str_radix(h, 16).map_err(|why| TaskIdError { text: s.to_string(), why })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_a_user_meets_names_one_id() {
        for s in ["0x40", "40", "0x0000000000000040", "0X40", "0000000000000040"] {
            assert_eq!(parse_task_id(s), Ok(0x40), "{s}");
        }
        assert_eq!(parse_task_id("0x100000003"), Ok(0x1_0000_0003));
    }

    #[test]
    fn what_is_not_a_hex_id_is_refused_with_its_text() {
        for s in ["", "0x", "0xg1", "64 ", "-1", "0x10000000000000000"] {
            let e = parse_task_id(s).unwrap_err().to_string();
            assert!(e.starts_with(&format!("`{s}` is not a task id")), "{s}: {e}");
        }
    }
}
