//! Gather throughput measurements (filled in below).
