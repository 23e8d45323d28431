//! The three example workloads, each with a host reference to verify against.
//!
//! | example | graph | checked by |
//! |---|---|---|
//! | [`Example::Vector`] | per chunk: `add → mul → scale → add_scalar → copy`, SPMD blocks, intermediates in scoped scratch tensors (reused across chunks, ordered by the tensor map) | bit-exact host reference |
//! | [`Example::PagedAttention`] | `scale(q)` fans out to `B·P` `attn_partial` tasks (one per KV page), which fan in to `B` `attn_merge` tasks | host reference within 1e-4 |
//! | [`Example::Storm`] | `N` tiny `add_scalar` tasks over `W` lanes (a dependency chain per lane) | task count, per-lane values, checksum |
use crate::device::orchestrations;
use crate::host::{Callable, RunArgs, RunOutput, TensorInit, Variant};

/// Which example.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Example {
    /// Elementwise chain.
    Vector,
    /// Paged-attention-shaped graph.
    PagedAttention,
    /// Task storm.
    Storm,
}

impl Example {
    /// Every example.
    pub const ALL: [Example; 3] = [Example::Vector, Example::PagedAttention, Example::Storm];

    /// Command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Example::Vector => "vector",
            Example::PagedAttention => "paged-attention",
            Example::Storm => "storm",
        }
    }

    /// Parses [`name`](Self::name).
    pub fn from_name(s: &str) -> Option<Example> {
        Example::ALL.into_iter().find(|e| e.name() == s)
    }

    /// The workload at `size`, device-orchestrated.
    pub fn build(self, size: Size) -> ExampleRun {
        match self {
            Example::Vector => {
                let (n, chunk, blocks) = match size {
                    Size::Small => (4096, 1024, 2),
                    Size::Full => (1 << 20, 1 << 15, 4),
                };
                vector(n, chunk, blocks)
            }
            Example::PagedAttention => match size {
                Size::Small => paged_attention(2, 4, 8, 16),
                Size::Full => paged_attention(16, 32, 16, 64),
            },
            Example::Storm => storm(match size {
                Size::Small => 5_000,
                Size::Full => 50_000,
            }),
        }
    }
}

/// How big.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Size {
    /// Test-sized (well under a second in debug builds).
    Small,
    /// The `ferry run` size (storm: 50,000 tasks).
    Full,
}

#[derive(Clone, Debug, PartialEq)]
enum Expect {
    Exact { tensor: usize, values: Vec<f32> },
    Close { tensor: usize, values: Vec<f32>, tol: f32 },
}

/// A ready-to-run example: its callable, its arguments, and what the result must be.
#[derive(Clone, Debug)]
pub struct ExampleRun {
    /// Which example.
    pub example: Example,
    /// The callable (device-orchestrated; see [`ExampleRun::with_variant`]).
    pub callable: Callable,
    /// Run arguments.
    pub args: RunArgs,
    /// Tasks the run executes.
    pub tasks: u64,
    expect: Expect,
}

/// A verification failure.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ExampleVerifyError {
    /// An element differs from the host reference.
    #[error("tensor {tensor}[{index}] = {got}, host reference {want}")]
    Mismatch {
        /// Tensor id.
        tensor: usize,
        /// Element.
        index: usize,
        /// Device value.
        got: f32,
        /// Host reference.
        want: f32,
    },
    /// The wrong number of tasks ran.
    #[error("{got} tasks ran, {want} expected")]
    TaskCount {
        /// Tasks that ran.
        got: u64,
        /// Tasks expected.
        want: u64,
    },
    /// The output tensor is missing.
    #[error("output tensor {tensor} was not returned")]
    Missing {
        /// Tensor id.
        tensor: usize,
    },
}

impl ExampleRun {
    /// The same workload run with `variant`.
    pub fn with_variant(mut self, variant: Variant) -> ExampleRun {
        self.callable = self.callable.with_variant(variant);
        self
    }

    /// The `TensorId` index of the example's result tensor.
    pub fn output_tensor(&self) -> usize {
        match &self.expect {
            Expect::Exact { tensor, .. } | Expect::Close { tensor, .. } => *tensor,
        }
    }

    /// Checks a run's output against the host reference; returns a checksum of the output.
    ///
    /// # Errors
    /// [`ExampleVerifyError`] naming the first difference.
    pub fn verify(&self, out: &RunOutput) -> Result<f64, ExampleVerifyError> {
        if out.stats.tasks != self.tasks {
            return Err(ExampleVerifyError::TaskCount { got: out.stats.tasks, want: self.tasks });
        }
        let (tensor, values, tol) = match &self.expect {
            Expect::Exact { tensor, values } => (*tensor, values, 0.0),
            Expect::Close { tensor, values, tol } => (*tensor, values, *tol),
        };
        let got = out
            .tensors
            .get(tensor)
            .and_then(|t| t.as_ref())
            .ok_or(ExampleVerifyError::Missing { tensor })?;
        for (index, (&g, &w)) in got.iter().zip(values).enumerate() {
            let ok = if tol == 0.0 {
                g.to_bits() == w.to_bits()
            } else {
                (g - w).abs() <= tol * (1.0 + w.abs())
            };
            if !ok {
                return Err(ExampleVerifyError::Mismatch { tensor, index, got: g, want: w });
            }
        }
        if got.len() != values.len() {
            return Err(ExampleVerifyError::Missing { tensor });
        }
        Ok(got.iter().map(|&v| f64::from(v)).sum())
    }
}

/// Deterministic values in `[-1, 1)` (xorshift64 from `seed · 0x9E3779B97F4A7C15 | 1`, the
/// top 24 bits of each step): the examples' inputs, and a workload file's `random` init.
pub fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// The vector example: `out = (a + b) · a · 0.5 + 1` over `n` elements in chunks.
pub fn vector(n: usize, chunk: usize, blocks: u32) -> ExampleRun {
    let (a, b) = (random(n, 1), random(n, 2));
    let want: Vec<f32> = a.iter().zip(&b).map(|(&a, &b)| (a + b) * a * 0.5 + 1.0).collect();
    let chunks = n.div_ceil(chunk.max(1)) as u64;
    ExampleRun {
        example: Example::Vector,
        callable: Callable::new("vector", Variant::DeviceOrchestrated, orchestrations::vector)
            .with_object(&ferry_programs::ORCH_VECTOR),
        args: RunArgs {
            tensors: vec![TensorInit::Data(a), TensorInit::Data(b), TensorInit::Zeros(n)],
            scalars: vec![n as u64, chunk as u64, u64::from(blocks)],
            scratch_bytes: 3 * (chunk as u64 * 4 + 64),
        },
        tasks: chunks * 5,
        expect: Expect::Exact { tensor: 2, values: want },
    }
}

/// The paged-attention example: `b` sequences of `p` KV pages of `s` tokens, head dim `d`.
pub fn paged_attention(b: usize, p: usize, s: usize, d: usize) -> ExampleRun {
    let q_raw = random(b * d, 3);
    let k = random(b * p * s * d, 4);
    let v = random(b * p * s * d, 5);
    let scale = 1.0 / (d as f32).sqrt();
    let mut want = vec![0.0f32; b * d];
    for bi in 0..b {
        let q: Vec<f32> = q_raw[bi * d..(bi + 1) * d].iter().map(|x| x * scale).collect();
        // Plain softmax attention over all b's tokens, in f64 for a reference independent of the
        // kernels' blocking.
        let mut scores = Vec::new();
        for t in 0..p * s {
            let base = (bi * p * s + t) * d;
            scores.push((0..d).map(|j| f64::from(q[j]) * f64::from(k[base + j])).sum::<f64>());
        }
        let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let l: f64 = scores.iter().map(|s| (s - m).exp()).sum();
        for j in 0..d {
            let o: f64 = (0..p * s)
                .map(|t| (scores[t] - m).exp() * f64::from(v[(bi * p * s + t) * d + j]))
                .sum();
            want[bi * d + j] = (o / l) as f32;
        }
    }
    ExampleRun {
        example: Example::PagedAttention,
        callable: Callable::new(
            "paged_attention",
            Variant::DeviceOrchestrated,
            orchestrations::paged_attention,
        )
        .with_object(&ferry_programs::ORCH_PAGED_ATTENTION),
        args: RunArgs {
            tensors: vec![
                TensorInit::Data(q_raw),
                TensorInit::Data(k),
                TensorInit::Data(v),
                TensorInit::Zeros(b * p * (d + 2)),
                TensorInit::Zeros(b * d),
                TensorInit::Zeros(b * d),
            ],
            scalars: vec![b as u64, p as u64, s as u64, d as u64],
            scratch_bytes: 0,
        },
        tasks: 1 + (b * p + b) as u64,
        expect: Expect::Close { tensor: 4, values: want, tol: 1e-4 },
    }
}

pub use crate::device::orchestrations::{STORM_LANES, STORM_LANE_LEN};

/// The task storm: `n` tiny `add_scalar` tasks over [`STORM_LANES`] lanes.
pub fn storm(n: u64) -> ExampleRun {
    let (w, l) = (STORM_LANES, STORM_LANE_LEN);
    let want: Vec<f32> = (0..w * l)
        .map(|i| {
            let lane = i / l;
            (n / w + u64::from(lane < n % w)) as f32
        })
        .collect();
    ExampleRun {
        example: Example::Storm,
        callable: Callable::new("storm", Variant::DeviceOrchestrated, orchestrations::storm)
            .with_object(&ferry_programs::ORCH_STORM),
        args: RunArgs {
            tensors: vec![TensorInit::Zeros((w * l) as usize)],
            scalars: vec![n, w, l],
            scratch_bytes: 0,
        },
        tasks: n,
        expect: Expect::Exact { tensor: 0, values: want },
    }
}
