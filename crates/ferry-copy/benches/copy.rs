//! Criterion benches (filled in below).
fn main() {}
