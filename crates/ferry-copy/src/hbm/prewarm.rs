//! [`HbmCopyEngine::prewarm`]: the streams, queues and code objects serving will use, created
//! before serving starts.

use super::*;

/// The copy group of backend `B`'s streams.
type Group<B> = <<<B as Backend>::Device as BackendDevice>::Stream as BackendStream>::CopyGroup;

/// What one device's prewarm did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DevicePrewarm {
    /// Device ordinal.
    pub ordinal: u32,
    /// Pooled streams warmed (0 with the kernel off).
    pub streams: usize,
    /// Whether the null stream was warmed in both directions.
    pub null_stream_warm: bool,
    /// The cap set on the pool (0 = uncapped).
    pub cap: usize,
    /// Compute queues of the device afterwards.
    pub compute_queues: u64,
    /// Copy-engine (SDMA) queues of the device afterwards.
    pub sdma_queues: u64,
    /// Device memory held by queues afterwards.
    pub queue_memory_bytes: u64,
    /// What went wrong (the device is then left lazy/uncapped).
    pub errors: Vec<String>,
}

/// What [`HbmCopyEngine::prewarm`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PrewarmReport {
    /// Streams per device asked for.
    pub streams: usize,
    /// Whether an earlier prewarm already ran (this call did nothing).
    pub already_prewarmed: bool,
    /// Per device.
    pub devices: Vec<DevicePrewarm>,
}

impl<B: Backend> HbmCopyEngine<B> {
    /// Prewarm (docs/design/copy-pool.md). For every device:
    /// - with the gather kernel on: create `n` pooled streams (their compute queues), size each
    ///   slot's staging to [`HbmConfig::prewarm_staging_fragments`], upload the whole staging on
    ///   the slot's stream and launch an *empty* gather (one block, zero descriptors, not
    ///   counted as a launch) so the kernel's code object loads;
    /// - with all `n` slots still held, run one null-stream copy each way (what the fallback
    ///   copies use). The `n` uploads and the first null-stream copy hold their copy engines at
    ///   the same time (a [`CopyGroup`]), so they take engines `0..=n` — exactly the engines
    ///   serving can reach (at most `n` gathers and one null-stream copy at once) — and create
    ///   only those engines' queues;
    /// - release the slots and cap the pool at `n` (kernel on only).
    ///
    /// `n == 0` does nothing (the pool stays uncapped and lazy). Idempotent: a second call
    /// returns `already_prewarmed`. Never fails: a device where something failed is logged,
    /// reported and left lazy/uncapped. The caller's current device is restored.
    pub fn prewarm(&self, n: usize) -> PrewarmReport {
        let mut done = lock(&self.prewarmed);
        let mut report = PrewarmReport { streams: n, ..Default::default() };
        if done.is_some() {
            report.already_prewarmed = true;
            return report;
        }
        if n == 0 {
            return report;
        }
        let saved = self.platform.current_ordinal();
        for (i, st) in self.devices.iter().enumerate() {
            let ordinal = i as u32;
            let mut r = DevicePrewarm { ordinal, ..Default::default() };
            match self.platform.set_current_device(ordinal) {
                Ok(()) => self.prewarm_device(ordinal, st, n, &mut r),
                Err(e) => r.errors.push(format!("set device {ordinal}: {}", chain(&e))),
            }
            if let Ok(d) = self.platform.device(ordinal) {
                let c = d.queue_counts();
                r.compute_queues = c.compute_queues;
                r.sdma_queues = c.sdma_queues;
                r.queue_memory_bytes = c.queue_memory_bytes;
            }
            for e in &r.errors {
                tracing::warn!(device = ordinal, "prewarm: {e}");
            }
            report.devices.push(r);
        }
        let _ = self.platform.set_current_device(saved);
        *done = Some(n);
        report
    }

    fn prewarm_device(
        &self,
        ordinal: u32,
        st: &DeviceState<B::Device>,
        n: usize,
        r: &mut DevicePrewarm,
    ) {
        let Ok(device) = self.platform.device(ordinal).cloned() else { return };
        let kernel = self.gather_enabled();
        let mut slots: Vec<SlotGuard<'_, B::Device>> = Vec::new();
        if kernel {
            let (s, err) = st.pool.take_for_prewarm(n);
            slots = s;
            if let Some(e) = err {
                r.errors.push(format!("creating pooled streams: {}", chain(&e)));
            }
        }
        // Uploads of the n slots plus the null stream's first copy meet while holding engines.
        let parties = (slots.len() + 1).min(device.copy_engine_count());
        let meet = Arc::new(Group::<B>::with_parties(parties));
        let mut warmed = Vec::new();
        for (i, mut g) in slots.into_iter().enumerate() {
            let in_meet = i + 1 < parties;
            match self.warm_slot(&mut g, in_meet.then_some(&meet)) {
                Ok(()) => warmed.push(g),
                Err(e) => {
                    if in_meet {
                        meet.withdraw();
                    }
                    r.errors.push(format!("warming slot {i}: {}", chain(&e)));
                    g.discard();
                }
            }
        }
        match self.warm_null_stream(&device, st, &meet) {
            Ok(()) => r.null_stream_warm = true,
            Err(e) => r.errors.push(format!("warming the null stream: {}", chain(&e))),
        }
        let mut ok = warmed.len();
        for mut g in warmed {
            match g.slot().stream.synchronize() {
                Ok(()) => drop(g),
                Err(e) => {
                    ok -= 1;
                    r.errors.push(format!("synchronizing a warmed slot: {}", chain(&e)));
                    g.discard();
                }
            }
        }
        r.streams = ok;
        if kernel && ok == n && r.errors.is_empty() {
            st.pool.set_cap(n);
            r.cap = n;
        }
    }

    /// Sizes the slot's staging, uploads all of it, launches the empty gather (not synchronized
    /// here: the caller synchronizes after the null-stream warm-up).
    fn warm_slot(
        &self,
        g: &mut SlotGuard<'_, B::Device>,
        meet: Option<&Arc<Group<B>>>,
    ) -> Result<(), BackendError> {
        let cap = self.cfg.prewarm_staging_fragments.max(1);
        let slot = g.slot();
        slot.staging.ensure(cap, true)?;
        let bytes = (slot.staging.capacity() * FRAGMENT_BYTES) as u64;
        let host = slot.staging.host.as_ptr() as *const u8;
        // SAFETY: the host staging (`capacity` descriptors = `bytes` bytes) belongs to this slot,
        // which the caller holds until after it synchronizes the slot's stream; nothing writes it
        // meanwhile.
        unsafe {
            match meet {
                Some(m) => slot.stream.copy_htod_async_grouped(host, slot.staging.dev, bytes, m)?,
                None => slot.stream.copy_htod_async(host, slot.staging.dev, bytes)?,
            }
        }
        slot.stream.launch_gather(slot.staging.dev, 0, false)
    }

    fn warm_null_stream(
        &self,
        device: &B::Device,
        st: &DeviceState<B::Device>,
        meet: &Arc<Group<B>>,
    ) -> Result<(), BackendError> {
        let _g = lock(&st.null_copy);
        let scratch = device.malloc(NULL_WARM_BYTES as u64).inspect_err(|_| meet.withdraw())?;
        let mut host = vec![0u8; NULL_WARM_BYTES];
        let res = (|| {
            let s = device.null_stream().inspect_err(|_| meet.withdraw())?;
            // SAFETY: `host` lives until after both synchronizes below and is not touched
            // meanwhile.
            unsafe {
                s.copy_htod_async_grouped(host.as_ptr(), scratch, NULL_WARM_BYTES as u64, meet)
            }
            .inspect_err(|_| meet.withdraw())?;
            s.synchronize()?;
            // SAFETY: as above.
            unsafe { s.copy_dtoh_async(scratch, host.as_mut_ptr(), NULL_WARM_BYTES as u64)? };
            s.synchronize()
        })();
        if res.is_err() {
            // A failed enqueue or synchronize can leave a copy queued: it must finish before
            // `scratch` and `host` go, and its outcome must not stay sticky on the null stream
            // for the next, unrelated blocking copy.
            if let Ok(s) = device.null_stream() {
                s.quiesce();
            }
        }
        let _ = device.free(scratch);
        res
    }
}
