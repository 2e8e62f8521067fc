//! The order of trials: warm-up blocks, then measured blocks in which every
//! variant runs once, shuffled per block with a recorded seed, so that drift
//! (thermal, page cache, noisy neighbours) hits all variants alike.

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// One slot of the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Position in the whole schedule, from 0.
    pub seq: u32,
    /// Index into the plan's variants.
    pub variant: usize,
    /// Block number: warm-up blocks first, then measured blocks, from 0.
    pub block: u32,
    pub warmup: bool,
}

/// Builds the schedule for `variants` variants, `warmup` warm-up blocks and `runs`
/// measured blocks. The same inputs always give the same order.
pub fn schedule(variants: usize, warmup: u32, runs: u32, seed: u64) -> Vec<Slot> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(variants * (warmup + runs) as usize);
    for block in 0..warmup + runs {
        let mut order: Vec<usize> = (0..variants).collect();
        order.shuffle(&mut rng);
        for v in order {
            out.push(Slot {
                seq: out.len() as u32,
                variant: v,
                block,
                warmup: block < warmup,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_block_runs_every_variant_once() {
        let s = schedule(4, 1, 3, 7);
        assert_eq!(s.len(), 16);
        for block in 0..4 {
            let mut vs: Vec<usize> = s
                .iter()
                .filter(|x| x.block == block)
                .map(|x| x.variant)
                .collect();
            vs.sort();
            assert_eq!(vs, [0, 1, 2, 3]);
        }
        assert!(s.iter().filter(|x| x.warmup).all(|x| x.block == 0));
        assert_eq!(s.iter().filter(|x| !x.warmup).count(), 12);
        assert!(s.iter().enumerate().all(|(i, x)| x.seq == i as u32));
    }

    #[test]
    fn seeded_and_shuffled() {
        assert_eq!(schedule(5, 0, 4, 42), schedule(5, 0, 4, 42));
        assert_ne!(schedule(5, 0, 4, 42), schedule(5, 0, 4, 43));
        let s = schedule(5, 0, 10, 1);
        let firsts: std::collections::HashSet<usize> = s.chunks(5).map(|c| c[0].variant).collect();
        assert!(firsts.len() > 1, "blocks are shuffled independently");
    }
}
