//! Shared by the header tests.
#[macro_use]
pub(crate) mod header;
