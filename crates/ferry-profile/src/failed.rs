//! [`FailedTask`]: the task whose kernel failed on its core, as a failed run's manifest records
//! it and as the page, the trace and the report mark it.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The task whose kernel failed on its core (a kernel fault, a kernel that never returned):
/// recorded in a failed run's [`RunOutcome`](crate::RunOutcome), carried in
/// [`RunMeta::failed`](crate::RunMeta::failed) so the views mark it.
///
/// Its id is the one every ferry command prints and reads: hex, `0x40` ([`FailedTask::label`]);
/// in JSON it is that string.
///
/// # Examples
/// ```
/// use ferry_profile::FailedTask;
/// let t = FailedTask { id: 0x40, kernel: "saxpy".into(), run: None };
/// assert_eq!(t.label(), "task 0x40 (saxpy)");
/// let j = serde_json::to_string(&t).unwrap();
/// assert_eq!(j, r#"{"id":"0x40","kernel":"saxpy"}"#);
/// assert_eq!(serde_json::from_str::<FailedTask>(&j).unwrap(), t);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedTask {
    /// The task's id (its `task_id` in every file of the profile).
    #[serde(serialize_with = "hex_id", deserialize_with = "parse_hex_id")]
    pub id: u64,
    /// The kernel's name (`id N` when the run's registry did not know it).
    pub kernel: String,
    /// In a session over several runs (`--repeat N`), the run it failed in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<u32>,
}

impl FailedTask {
    /// `task 0x40 (saxpy)`: the task as every ferry command names it.
    pub fn label(&self) -> String {
        format!("task {:#x} ({})", self.id, self.kernel)
    }
}

fn hex_id<S: Serializer>(id: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{id:#x}"))
}

fn parse_hex_id<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let s = String::deserialize(d)?;
    let h = s.strip_prefix("0x").ok_or_else(|| {
        serde::de::Error::custom(format!("task id `{s}` is not hex with a 0x prefix"))
    })?;
    u64::from_str_radix(h, 16).map_err(|e| serde::de::Error::custom(format!("task id `{s}`: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_that_is_not_hex_is_refused_with_its_text() {
        for bad in [r#"{"id":"64","kernel":"k"}"#, r#"{"id":"0xzz","kernel":"k"}"#] {
            let e = serde_json::from_str::<FailedTask>(bad).unwrap_err().to_string();
            assert!(e.contains("task id `"), "{bad}: {e}");
        }
    }
}
