//! The DFX measurements of `ferry bench dfx`: the transport's ([`transport`]) and what each
//! subsystem costs a run ([`costs`], with the CPU split by thread role of [`thread_cpu`]).
pub mod costs;
pub mod thread_cpu;
pub mod transport;
