//! Decode types for the Perfetto traces ferry writes, generated at build time by `prost-build`
//! from `proto/perfetto_trace.proto`: the relevant messages of Perfetto's public trace schema
//! (`Trace`, `TracePacket`, `TrackEvent`, `TrackDescriptor`, `ProcessDescriptor`,
//! `ThreadDescriptor`, `CounterDescriptor`, `DebugAnnotation`, `InternedData`, `EventName`) with
//! their published field numbers.
//!
//! Test support, deliberately independent of the hand-encoding writer in
//! `ferry_profile::perfetto`: tests decode what the writer produced with these definitions.
//! Perfetto's protos are proto2, so every scalar is optional.
//!
//! # Examples
//! ```
//! use ferry_perfetto_proto::protos::Trace;
//! use prost::Message;
//! // One packet: trusted_packet_sequence_id = 1.
//! let trace = Trace::decode(&[0x0A, 0x02, 0x50, 0x01][..]).unwrap();
//! assert_eq!(trace.packet[0].trusted_packet_sequence_id, Some(1));
//! ```

/// `package perfetto.protos`, as generated.
pub mod protos {
    // Generated code: field docs are the schema's, which the subset .proto does not carry.
    #![allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]
    include!(concat!(env!("OUT_DIR"), "/perfetto.protos.rs"));
}

pub use prost::Message;
