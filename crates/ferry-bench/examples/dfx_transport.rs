//! Prints `ferry_bench::dfx::transport::run` as JSON with the hot-path figures of each arch (the
//! drain figures cover both arches in every report; `--quick` for a smoke run).
//!
//! `cargo run -p ferry-bench --release --example dfx_transport`

use ferry_abi::arch::Arch;
use ferry_bench::dfx::transport::{run, TransportBenchConfig};

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    for arch in Arch::ALL {
        let base =
            if quick { TransportBenchConfig::quick() } else { TransportBenchConfig::default() };
        let report = run(&TransportBenchConfig { arch, ..base });
        println!("{}", report.to_json());
    }
}
