//! Loom models (filled in later).
