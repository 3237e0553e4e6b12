//! PCIe throughput in turn. NVML's `nvmlDeviceGetPcieThroughput` waits out its own 20 ms
//! window per call (rx and tx: 40 ms per GPU, a sleep), so reading every PCIe GPU in every
//! sample made one sample of 8 GPUs take 336 ms of the sampler's wall time. Here one GPU is read
//! per sample, the GPUs in turn, and every GPU shows its last reading in between: a sample
//! stays at one GPU's 40 ms, and a GPU's figure is at most `n` samples old for `n` PCIe GPUs
//! (the GPU pane's header says "PCIe in turn"). NVLink counters are cumulative and cheap: not rotated.

use super::GpuSample;

/// Which GPU's PCIe throughput the next sample reads, and each GPU's last reading.
#[derive(Debug, Default)]
pub struct PcieRotation {
    /// Samples taken; the next GPU read is the one after the last read, among the PCIe GPUs.
    next: usize,
    /// Last (rx, tx) KB/s per GPU index; `None`: never read yet.
    last: Vec<Option<(Option<u64>, Option<u64>)>>,
}

impl PcieRotation {
    /// Fill the link figures of the GPUs in `samples` marked `link == Some("PCIe")`: `read` is
    /// called for one of them (the next in turn), the others get their last reading. A GPU whose reading
    /// has neither figure (not supported) loses its `link` mark, as before the rotation.
    pub fn apply(
        &mut self,
        samples: &mut [GpuSample],
        mut read: impl FnMut(u32) -> (Option<u64>, Option<u64>),
    ) {
        let pcie: Vec<usize> = (0..samples.len())
            .filter(|&i| samples[i].link == Some("PCIe"))
            .collect();
        if pcie.is_empty() {
            return;
        }
        let due = pcie[self.next % pcie.len()];
        self.next = self.next.wrapping_add(1);
        let max_index = samples.iter().map(|s| s.index as usize + 1).max();
        if self.last.len() < max_index.unwrap_or(0) {
            self.last.resize(max_index.unwrap_or(0), None);
        }
        let index = samples[due].index;
        self.last[index as usize] = Some(read(index));
        for &i in &pcie {
            let s = &mut samples[i];
            match self.last[s.index as usize] {
                Some((None, None)) => s.link = None,
                Some((rx, tx)) => (s.link_rx_kbs, s.link_tx_kbs) = (rx, tx),
                None => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::GpuSource;
    use crate::gpu::fake::FakeGpus;

    /// Eight PCIe GPUs from the fake source: one throughput read per sample, each GPU in turn,
    /// the others showing their last reading.
    #[test]
    fn one_pcie_gpu_is_read_per_sample_in_turn_and_the_others_keep_their_last_reading() {
        let mut fake = FakeGpus::h200(8);
        let mut rot = PcieRotation::default();
        let mut reads: Vec<u32> = Vec::new();
        let mut shown: Vec<Vec<Option<u64>>> = Vec::new();
        for _ in 0..16 {
            let mut samples = fake.sample().unwrap();
            // What the fake measured, as the NVML read of that GPU would have answered.
            let truth: Vec<(Option<u64>, Option<u64>)> = samples
                .iter()
                .map(|s| (s.link_rx_kbs, s.link_tx_kbs))
                .collect();
            for s in &mut samples {
                s.link = Some("PCIe");
                (s.link_rx_kbs, s.link_tx_kbs) = (None, None);
            }
            let mut read_now = None;
            rot.apply(&mut samples, |i| {
                read_now = Some(i);
                truth[i as usize]
            });
            let i = read_now.expect("one GPU read per sample");
            reads.push(i);
            assert_eq!(
                (
                    samples[i as usize].link_rx_kbs,
                    samples[i as usize].link_tx_kbs
                ),
                truth[i as usize],
                "the GPU read this sample shows this sample's figure"
            );
            shown.push(samples.iter().map(|s| s.link_rx_kbs).collect());
        }
        assert_eq!(reads, (0..16).map(|n| n % 8).collect::<Vec<u32>>());
        // Before its first read a GPU has no figure; afterwards it keeps its last one until
        // its turn comes again.
        assert_eq!(shown[0][1], None);
        for (n, now) in shown.iter().enumerate().skip(8) {
            for (g, figure) in now.iter().enumerate() {
                let last_read = if g <= n % 8 {
                    n - n % 8 + g
                } else {
                    n - n % 8 + g - 8
                };
                assert_eq!(*figure, shown[last_read][g], "sample {n}, GPU {g}");
            }
        }
    }

    #[test]
    fn nvlink_gpus_are_left_alone_and_an_unsupported_pcie_counter_drops_the_mark() {
        let mut fake = FakeGpus::h200(2);
        let mut samples = fake.sample().unwrap();
        let before = samples[0].clone();
        samples[1].link = Some("PCIe");
        let mut rot = PcieRotation::default();
        let mut calls = 0;
        rot.apply(&mut samples, |_| {
            calls += 1;
            (None, None)
        });
        assert_eq!(calls, 1);
        assert_eq!(samples[0], before, "an NVLink GPU is not touched");
        assert_eq!(samples[1].link, None, "no figure at all: no link column");
    }
}
