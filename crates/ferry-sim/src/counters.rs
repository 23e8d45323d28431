//! Per-device event counters: what the simulated driver did, observable by tests and benches.
use crate::sync::{AtomicU64, Ordering};

macro_rules! counters {
    ($( $(#[$doc:meta])* $variant:ident => $field:ident, )*) => {
        /// One counter of a device.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(usize)]
        pub enum Counter { $( $(#[$doc])* $variant, )* }

        impl Counter {
            /// Every counter.
            pub const ALL: &'static [Counter] = &[$(Counter::$variant,)*];
        }

        /// A point-in-time copy of every counter of a device.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct CounterSnapshot { $( $(#[$doc])* pub $field: u64, )* }

        impl CounterSnapshot {
            /// The value of one counter.
            pub fn get(&self, c: Counter) -> u64 {
                match c { $( Counter::$variant => self.$field, )* }
            }

            /// `(name, value)` for every counter, in declaration order.
            pub fn fields(&self) -> Vec<(&'static str, u64)> {
                vec![$( (stringify!($field), self.$field), )*]
            }
        }

        /// The live counters of one device.
        #[derive(Debug, Default)]
        pub struct Counters { cells: [AtomicU64; [$(Counter::$variant,)*].len()] }

        impl Counters {
            /// Reads every counter.
            pub fn snapshot(&self) -> CounterSnapshot {
                CounterSnapshot { $( $field: self.get(Counter::$variant), )* }
            }
        }
    };
}

counters! {
    /// Streams created (the null stream not included).
    StreamsCreated => streams_created,
    /// Compute hardware queues created: the null stream's, and one per pooled stream up to
    /// the device's `max_hw_queues` (later streams share them).
    ComputeQueuesCreated => compute_queues_created,
    /// Copy-engine (SDMA) queues created: one per engine, on its first copy.
    SdmaQueuesCreated => sdma_queues_created,
    /// Device memory held by hardware queues' context-save areas.
    QueueMemoryBytes => queue_memory_bytes,
    /// First host-to-device copy on the null stream (0 or 1).
    NullStreamInitHtod => null_stream_init_htod,
    /// First device-to-host copy on the null stream (0 or 1).
    NullStreamInitDtoh => null_stream_init_dtoh,
    /// Kernel code objects loaded (first launch of each kernel name on this device).
    CodeObjectLoads => code_object_loads,
    /// Kernel launches accepted.
    Launches => launches,
    /// Copies accepted (any direction, any stream).
    Copies => copies,
    /// Bytes copied host to device by copy operations.
    BytesHtod => bytes_htod,
    /// Bytes copied device to host by copy operations.
    BytesDtoh => bytes_dtoh,
    /// Bytes copied device to device by copy operations.
    BytesDtod => bytes_dtod,
    /// Bytes pushed by `write_range_to_device` (non-SVM only).
    BytesToDevice => bytes_to_device,
    /// Bytes pulled by `read_range_from_device` (non-SVM only).
    BytesFromDevice => bytes_from_device,
    /// Stream and event synchronisations.
    Synchronizes => synchronizes,
    /// Events recorded.
    EventRecords => event_records,
    /// Times a queue creation had to wait for the driver lock.
    DriverLockWaits => driver_lock_waits,
    /// Faults injected.
    FaultsInjected => faults_injected,
    /// Device allocations made through `Device::malloc` (queue context areas not included).
    DeviceAllocs => device_allocs,
    /// KFD-style evictions of the device's queues (`Device::evict_queues`).
    QueueEvictions => queue_evictions,
    /// Copies or kernels that waited for evicted queues to be restored.
    EvictionWaits => eviction_waits,
}

impl Counters {
    /// Adds `n` to counter `c`.
    pub fn add(&self, c: Counter, n: u64) {
        // Relaxed: counters are statistics; readers synchronise through the operation that made
        // the count meaningful (a stream synchronize, a join), not through the counter.
        self.cells[c as usize].fetch_add(n, Ordering::Relaxed);
    }

    /// Adds one to counter `c`.
    pub fn bump(&self, c: Counter) {
        self.add(c, 1);
    }

    /// Reads counter `c`.
    pub fn get(&self, c: Counter) -> u64 {
        // Relaxed: see `add`.
        self.cells[c as usize].load(Ordering::Relaxed)
    }
}
