//! Criterion benches of the DFX transport (filled in later).
fn main() {}
